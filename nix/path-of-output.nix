# A derivation's output as a Nix path value: what kernel-builder's `path` must be.
#
# kernel-builder reads `path` while evaluating (`path + "/build.toml"`) and hands it to nixpkgs'
# lib.fileset (`toSource { root = path; }`, `fileFilter` over `path + "/torch-ext"`), which takes
# path values only and refuses a derivation or any other string-like value. So the output is built
# during evaluation (import from derivation): reading it with `readDir` realises the derivation and
# lets pure evaluation read that store path; the path value built from the output's store path
# (its string context dropped, which a path value cannot carry) then points at the built tree.
drv:
let
  outPath = "${drv}";
in
builtins.seq (builtins.readDir outPath) (/. + builtins.unsafeDiscardStringContext outPath)
