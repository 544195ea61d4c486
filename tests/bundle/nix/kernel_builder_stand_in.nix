# A stand-in for flake.nix's `kernel-builder` input, so that tests/bundle/test_nix_flake.py can run
# the flake's `outputs` offline.
#
# `lib.genKernelFlakeOutputs` enforces what kernel-builder's own Nix code needs of its arguments,
# failing with the message kernel-builder (or the nixpkgs lib.fileset it uses) gives:
#   - `self` is passed and carries a revision               nix-builder/lib/gen-flake-outputs.nix
#   - `path + "/build.toml"` reads, with [general] backends  nix-builder/lib/kernel-config.nix
#   - `path` is a path value                                 lib.fileset.toSource's `root`, from
#                                                            nix-builder/lib/source-set.nix
#   - `path + "/torch-ext"` exists                           source-set.nix
#   - torch-ext/<name>/__init__.py exists and
#     torch-ext/<name>/<name> does not                       nix-builder/pkgs/kernel-layout-check
# and reports what a build would take from `path`: the files the source set selects (files under
# torch-ext/ and tests/ whose name ends in a `pyext` extension, plus build.toml) and whether the
# bundle would ship `benchmarks/` (nix-builder/lib/build.nix, mkExtensionBundle).
#
# Build sets are made as kernel-builder makes them (flake.nix `genKernelFlakeOutputs`,
# nix-builder/lib/build-sets.nix, build.nix `filterApplicableBuildSets`, variants/torch.nix):
#   - the version set is `torchVersions defaultVersions`; `torchVersions` must be a function
#     (kernel-builder aborts with its message otherwise); `defaultVersions` is the part of
#     nix-builder/versions.nix a TPU kernel meets: its TPU entry keeps `bundleBuild = false`
#   - one build set per version and system; those of x86_64-linux whose backend build.toml lists
#     apply; a noarch kernel's variant is `torch-<backend>`
#   - `redistributable` holds every applicable set; `bundle` (mkExtensionBundle, bundleOnly) only
#     those with `bundleBuild`: the stand-in's `bundle.variants` lists them.
#
# nixpkgs is faked as far as flake.nix uses it. `runCommand` stands for the port build, which a
# real evaluation runs as import from derivation and which needs the network (fetchPypi): it
# returns `builtTree`, a directory holding what that build writes (the test writes it with
# tools/bundle/source_tree.py). The evaluation stops there; nothing is built or fetched.
{ builtTree }:
let
  stub =
    name: attrs:
    attrs
    // {
      type = "derivation";
      inherit name;
      outPath = "/stand-in/${name}";
    };

  ps = {
    fetchPypi =
      args@{ pname, version, ... }:
      stub "${pname}-${version}${
        if (args.format or "setuptools") == "wheel" then "-${args.python}-none-any.whl" else ".tar.gz"
      }" { fetched = args; };
    buildPythonPackage = args: stub "${args.pname}-${args.version}" { built = args; };
    setuptools = stub "setuptools" { };
    scikit-build = stub "scikit-build" { };
    cython = stub "cython" { };
    packaging = stub "packaging" { };
  };

  pkgs = {
    lib.concatMapStringsSep = sep: f: list: builtins.concatStringsSep sep (map f list);
    python312 = {
      pkgs = ps;
      withPackages = select: stub "python3.12-env" { packages = select ps; };
    };
    cmake = stub "cmake" { };
    ninja = stub "ninja" { };
    runCommand =
      name: env: script:
      {
        type = "derivation";
        inherit name env script;
        outPath = builtTree;
      };
  };

  isStringLike = x: builtins.isString x || builtins.isPath x || x ? outPath || x ? __toString;
  hasSuffix =
    suffix: s:
    let
      n = builtins.stringLength s;
      k = builtins.stringLength suffix;
    in
    n >= k && builtins.substring (n - k) k s == suffix;

  # Every file below `dir`, as paths relative to the kernel root (`prefix` is `dir`'s).
  filesUnder =
    dir: prefix:
    builtins.concatLists (
      map (
        name:
        if (builtins.readDir dir).${name} == "directory" then
          filesUnder (dir + "/${name}") "${prefix}${name}/"
        else
          [ "${prefix}${name}" ]
      ) (builtins.attrNames (builtins.readDir dir))
    );

  # nix-builder/versions.nix as far as a TPU kernel on x86_64-linux meets it (snapshot 8ac69fc5).
  defaultVersions = [
    {
      torchVersion = "2.11";
      cpu = true;
      systems = [ "x86_64-linux" ];
      bundleBuild = false;
    }
    {
      torchVersion = "2.11";
      tpu = true;
      systems = [ "x86_64-linux" ];
      bundleBuild = false; # kernel-builder: torch_tpu's patched output cannot go into the shared cache
    }
    {
      torchVersion = "2.12";
      cpu = true;
      systems = [
        "aarch64-darwin"
        "x86_64-linux"
        "aarch64-linux"
      ];
      bundleBuild = true;
    }
    {
      torchVersion = "2.12";
      cudaVersion = "12.6";
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      bundleBuild = true;
    }
  ];
  backendOf =
    version:
    if version.cpu or false then
      "cpu"
    else if version ? cudaVersion then
      "cuda"
    else if version.tpu or false then
      "tpu"
    else
      throw "No compute framework set in Torch version";

  genKernelFlakeOutputs =
    {
      path,
      self ? null,
      rev ? null,
      doGetKernelCheck ? true,
      pythonCheckInputs ? _: [ ],
      pythonNativeCheckInputs ? _: [ ],
      torchVersions ? _: defaultVersions,
    }:
    assert
      (builtins.isFunction torchVersions)
      || abort "`torchVersions` must be a function taking one argument (the default version set)";
    let
      flakeRev =
        if self == null then
          throw "Flake's `self` must be passed to `genKernelFlakeOutputs`"
        else
          self.shortRev or self.dirtyShortRev or (throw ''
            Kernel is not in a git repository, this will create a non-reproducible build.
          '');

      toml = builtins.fromTOML (builtins.readFile (path + "/build.toml"));
      config =
        if toml.general ? backends then
          toml
        else
          throw "build.toml seems to be of an older version, update it with kernel-builder update-build";

      root =
        if builtins.isPath path then
          path
        else if isStringLike path then
          throw ''
            lib.fileset.toSource: `root` ("${toString path}") is a string-like value, but it should be a path instead.
                Paths in strings are not supported by `lib.fileset`, use `lib.sources` or derivations instead.''
        else
          throw "lib.fileset.toSource: `root` is of type ${builtins.typeOf path}, but it should be a path instead.";

      torchExt =
        if builtins.pathExists (root + "/torch-ext") then
          root + "/torch-ext"
        else
          throw "Kernel should have torch-ext or tvm-ffi-ext directory";

      moduleName = builtins.replaceStrings [ "-" ] [ "_" ] config.general.name;
      layoutChecked =
        if !builtins.pathExists (torchExt + "/${moduleName}/__init__.py") then
          throw "Python module at source/torch-ext/${moduleName} must contain __init__.py"
        else if builtins.pathExists (torchExt + "/${moduleName}/${moduleName}") then
          throw "Python module at source/torch-ext/${moduleName} must not have ${moduleName} file or directory."
        else
          moduleName;

      extConfig = config.torch or config.torch-noarch or config.tvm-ffi or { };
      pyExt = extConfig.pyext or [
        "py"
        "pyi"
      ];
      selectedUnder =
        dir: prefix:
        builtins.filter (
          file: builtins.any (ext: hasSuffix ".${ext}" (baseNameOf file)) pyExt
        ) (if builtins.pathExists dir then filesUnder dir prefix else [ ]);
      sourceFiles = [
        "build.toml"
      ]
      ++ selectedUnder torchExt "torch-ext/"
      ++ selectedUnder (root + "/tests") "tests/";

      checked = builtins.seq flakeRev (builtins.seq config (builtins.seq layoutChecked true));

      buildSets = builtins.concatMap (
        version:
        map (system: {
          buildConfig = version // {
            inherit system;
            backend = backendOf version;
          };
          bundleBuild = version.bundleBuild or false;
        }) version.systems
      ) (torchVersions defaultVersions);
      applicable = builtins.filter (
        set: set.buildConfig.system == "x86_64-linux" && builtins.elem set.buildConfig.backend config.general.backends
      ) buildSets;
      variantOf = set: "torch-${set.buildConfig.backend}";
      variant = set: {
        name = variantOf set;
        value = {
          inherit checked flakeRev sourceFiles;
          inherit (set) bundleBuild;
          inherit (set.buildConfig) torchVersion;
          pathIsPathValue = builtins.isPath path;
          moduleName = layoutChecked;
        };
      };
    in
    {
      packages.x86_64-linux = {
        redistributable = builtins.listToAttrs (map variant applicable);
        bundle = {
          variants = builtins.seq checked (map variantOf (builtins.filter (set: set.bundleBuild) applicable));
          shipsBenchmarks = builtins.seq checked (builtins.pathExists (root + "/benchmarks"));
        };
      };
    };
in
{
  inputs.nixpkgs.legacyPackages.x86_64-linux = pkgs;
  lib = { inherit genKernelFlakeOutputs; };
}
