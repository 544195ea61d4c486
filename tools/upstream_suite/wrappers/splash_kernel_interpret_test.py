"""Upstream's splash kernel tests in Pallas TPU interpret mode (ours: a wrapper, not upstream's file).

Upstream's `SplashAttentionTest` and `SplashAttentionDropoutTest` pass `interpret=self.INTERPRET`
to every kernel call but skip off TPU in `setUp`. These subclasses lift that guard only and set
INTERPRET, so the same cases run the kernel through JAX's TPU interpreter on this CPU host.
Upstream's "deterministic" hypothesis profile is kept (derandomized: both sides draw the same
examples) with its 15 examples cut to TOKAMAX_SUITE_EXAMPLES (1 unless set): one example of one
property test costs tens of seconds in interpret mode.
"""

import os

import hypothesis
from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_kernel_test as kernel_test
from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_test_utils as test_utils

hypothesis.settings.register_profile(
    "interpret", hypothesis.settings.get_profile("deterministic"),
    max_examples=int(os.environ.get("TOKAMAX_SUITE_EXAMPLES", "1")))
hypothesis.settings.load_profile("interpret")


class SplashAttentionInterpretTest(kernel_test.SplashAttentionTest):
    INTERPRET = True

    def setUp(self) -> None:  # the base's setUp minus its TPU-backend skip
        test_utils.SplashAttentionTestCase.setUp(self)


class SplashAttentionDropoutInterpretTest(kernel_test.SplashAttentionDropoutTest):
    INTERPRET = True

    def setUp(self) -> None:
        test_utils.SplashAttentionTestCase.setUp(self)


