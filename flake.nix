{
  description = "kernels-community/tokamax: Tokamax 0.0.17's Pallas Mosaic TPU kernels, ported at build time";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  outputs =
    { self, kernel-builder }:
    let
      # The port is pure Python and its output is the same on every system; it runs on x86_64-linux,
      # where TPU hosts are.
      pkgs = kernel-builder.inputs.nixpkgs.legacyPackages.x86_64-linux;
      ps = pkgs.python312.pkgs;

      # The recipe's artifacts, as fixed-output fetches. These hashes are the sha256 pins of
      # tokamax/port/port.kdl in SRI form; tests/bundle/test_kernel_files.py keeps them equal.
      artifacts = [
        (ps.fetchPypi {
          pname = "tokamax";
          version = "0.0.17";
          hash = "sha256-HSDD1sXK5N3y8JJFrfizX8WzwmmXs0pOSzMi1ZeqYnE=";
        })
        (ps.fetchPypi {
          pname = "qwix";
          version = "0.1.8";
          format = "wheel";
          dist = "py3";
          python = "py3";
          hash = "sha256-D0aG9/EKEWh4f6xPuvTZiDvLj3igHy/xzTg005+FmxI=";
        })
        (ps.fetchPypi {
          pname = "immutabledict";
          version = "4.3.1";
          format = "wheel";
          dist = "py3";
          python = "py3";
          hash = "sha256-yfrNwP8w/bjjW9FlMgJsrEcqVJ4YLJT6IBtRsl5L978=";
        })
        (ps.fetchPypi {
          pname = "einshape";
          version = "1.0";
          format = "wheel";
          dist = "py3";
          python = "py3";
          hash = "sha256-QtpMLeo6J/h+5Fp87lBypja5fLGEuwe/XWQSug/3uWU=";
        })
      ];

      # The KDL parser the port reads its recipe with.
      ckdl = ps.buildPythonPackage rec {
        pname = "ckdl";
        version = "1.0";
        pyproject = true;
        src = ps.fetchPypi {
          inherit pname version;
          hash = "sha256-43VG6pz+Eu0AM8mgODPAQFQJ2SCYAtcodV+XjdAl6ss=";
        };
        build-system = [
          ps.setuptools
          ps.scikit-build
          ps.cython
        ];
        nativeBuildInputs = [
          pkgs.cmake
          pkgs.ninja
        ];
        dontUseCmakeConfigure = true;
        pythonImportsCheck = [ "ckdl" ];
      };

      portPython = pkgs.python312.withPackages (_: [
        ckdl
        ps.packaging
      ]);

      # The kernel source kernel-builder builds from: the recipe applied to the artifacts above, checked
      # against tokamax/port/port.lock.json like every other port run, then the tree kernel-builder
      # reads (build.toml, CARD.md, kernels.lock, torch-ext/ with _ported/, tests/kernel) written by
      # tools/bundle/source_tree.py. Nothing of upstream is in git: it exists only in this output.
      kernelSource = pkgs.runCommand "tokamax-kernel-source" { nativeBuildInputs = [ portPython ]; } ''
        mkdir cache
        ${pkgs.lib.concatMapStringsSep "\n" (a: "cp ${a} cache/${a.name}") artifacts}
        cp -r ${self} repo
        chmod -R u+w repo
        cd repo
        export PYTHONDONTWRITEBYTECODE=1
        python -m tools.porter --cache "$NIX_BUILD_TOP/cache"
        python -m tools.bundle.source_tree "$out"
      '';
    in
    kernel-builder.lib.genKernelFlakeOutputs {
      inherit self;
      # A path value (lib.fileset takes nothing else): evaluation builds kernelSource first (IFD).
      path = import ./nix/path-of-output.nix kernelSource;
      # kernel-builder's version set, with its TPU build set made a bundle build: upstream marks it
      # `bundleBuild = false` only because its patched torch_tpu output cannot go into the public
      # build cache. A maintainer with the gated torch_tpu wheel in the store builds it locally, so
      # `.#bundle` holds torch-tpu (the only backend build.toml names). Every other entry is as is.
      torchVersions =
        versions: map (version: if version.tpu or false then version // { bundleBuild = true; } else version) versions;
    };
}
