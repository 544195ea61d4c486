# What kernel-builder's Nix lock reader does with a kernel's kernels.lock, written for
# tests/torch/test_hub_and_deps.py. The reader (nix-builder/pkgs/fetch-kernel-deps/default.nix on
# huggingface/kernels' work-in-progress branch kernel-deps-flat-lock) parses the lock as JSON and
# hands each entry's `dependency.repo-id`, `lock.commit` and `lock.hash` to fetchFromHuggingFace:
# a fixed-output fetch of the Hub repository at that commit, whose recursive (NAR) sha256 must be
# `hash`.
#
# Offline, `fetchFromHuggingFace` here takes the commit's snapshot from the local Hub cache the test
# lays out, with `hash` as the expected recursive sha256: Nix refuses it unless the hash is the
# snapshot's. Run with --readonly-mode, this checks the hash without writing the store.
{ lockFile, hubCache }:
let
  repoDir = repoId: "kernels--${builtins.replaceStrings [ "/" ] [ "--" ] repoId}";
  fetchFromHuggingFace =
    {
      repoId,
      type,
      revision,
      hash,
    }:
    assert type == "kernel";
    builtins.path {
      path = /. + "${hubCache}/${repoDir repoId}/snapshots/${revision}";
      name = builtins.replaceStrings [ "/" ] [ "-" ] "${repoId}-${revision}";
      sha256 = hash;
      recursive = true;
    };
in
map (lock: {
  inherit (lock) dependency;
  path = fetchFromHuggingFace {
    repoId = lock.dependency.repo-id;
    type = "kernel";
    revision = lock.lock.commit;
    inherit (lock.lock) hash;
  };
}) (builtins.fromJSON (builtins.readFile lockFile))
