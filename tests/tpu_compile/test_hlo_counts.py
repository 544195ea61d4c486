"""The scheduled HLO's counts and collective sizes, on lines as libtpu prints them: an async
collective's start returns a tuple whose layouts hold parentheses of their own."""

from __future__ import annotations

from tools.tpu_compile import compiler

HLO = """
  %collective-permute-start.2 = (bf16[1,8,4096,128]{3,2,1,0:T(8,128)(2,1)}, bf16[1,8,4096,128]{3,2,1,0:T(8,128)(2,1)S(1)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%param.78), channel_id=1
  %collective-permute-done.2 = bf16[1,8,4096,128]{3,2,1,0:T(8,128)(2,1)S(1)} collective-permute-done(%collective-permute-start.2)
  %all-gather.1 = f32[8,2,8192]{2,1,0:T(2,128)S(1)} all-gather(%fusion), channel_id=2, dimensions={0}
  %psum.7 = bf16[8192,4096]{1,0:T(8,128)(2,1)} all-reduce(%get-tuple-element.23), channel_id=1, to_apply=%region_4.5
  %gmm = bf16[64,128]{1,0} custom-call(%a, %b), custom_call_target="tpu_custom_call"
"""  # noqa: E501 - HLO lines as printed


def test_counts_take_tuple_results_and_skip_the_done_ops():
    assert compiler.hlo_counts(HLO) == {"tpu_custom_call": 1, "all-reduce": 1, "all-gather": 1, "reduce-scatter": 0,
                                        "all-to-all": 0, "collective-permute": 1}


def test_largest_collective_is_the_biggest_array_of_its_result():
    largest = compiler.largest_collectives(HLO)
    assert largest["collective-permute"] == 8 * 4096 * 128 * 2
    assert largest["all-gather"] == 8 * 2 * 8192 * 4
    assert largest["all-reduce"] == 8192 * 4096 * 2
    assert largest["all-to-all"] == 0
