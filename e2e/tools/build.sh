#!/usr/bin/env bash
# Build the real parts of the end-to-end suite from their published Go modules, pinned by the wrapper modules
# beside this script (etcd/, kwok/, promtool/, kueue/, karpenter/, k8s/, pulumi/, pulumi-language-python/,
# pulumi-kubernetes/: go.mod + go.sum, and our own main package where the upstream one cannot be built), into a
# git-ignored tool folder:
#   e2e/tools/build.sh [BIN_DIR]      (default: .e2e-cache/bin in the project)
# A tool is rebuilt only when its pins, its Go files, this script or the Go version change (a stamp per tool), so
# a warm run returns in seconds. Go's own module and build caches stay where Go keeps them, shared by every
# clone on the machine. Nothing is downloaded but Go modules from the module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-"$here/../../.e2e-cache/bin"}
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -modcacherw -trimpath"

# The Kubernetes release of k8s/go.mod, and the version stamp `kube-apiserver --version` and /version report
# (the -X set of kubernetes' hack/lib/version.sh; without it the server says v0.0.0-master).
K8S=$(cd "$here/k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$K8S" | cut -d. -f2)
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
k8s_ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

# build TOOL OUTPUTS... -- GO_BUILD_ARGS...: skip when the stamp matches and every output exists.
build() {
  local tool=$1; shift
  local outputs=() args=()
  while [ "$1" != "--" ]; do outputs+=("$1"); shift; done
  shift; args=("$@")
  local stamp
  stamp=$(cat "$here/$tool/go.mod" "$here/$tool/go.sum" $(find "$here/$tool" -name '*.go' | sort) "$0" \
    | sha256sum | cut -c1-16)-$(go env GOVERSION)
  local have=1
  for out in "${outputs[@]}"; do [ -x "$bin/$out" ] || have=0; done
  if [ "$have" = 1 ] && [ "$(cat "$bin/.$tool.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "e2e tools: $tool is built ($stamp)"
    return
  fi
  echo "e2e tools: building $tool (${outputs[*]})"
  local start=$SECONDS
  (cd "$here/$tool" && go build "${args[@]}")
  echo "$stamp" > "$bin/.$tool.stamp"
  echo "e2e tools: $tool built in $((SECONDS - start)) s"
}

# The staging modules k8s/go.mod replaces must be exactly those k8s.io/kubernetes points at ./staging.
upstream=$(cd "$here/k8s" && go mod download -json "k8s.io/kubernetes@$K8S" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
want=$(grep '=> ./staging' "$upstream" | awk '{print $1}' | sort)
have=$(sed -n 's/^\t\(k8s\.io\/[a-z-]*\) => .*/\1/p' "$here/k8s/go.mod" | sort)
if [ "$want" != "$have" ]; then
  echo "e2e tools: k8s/go.mod must replace exactly the staging modules of k8s.io/kubernetes $K8S:" >&2
  diff <(echo "$want") <(echo "$have") >&2 || true
  exit 2
fi

build etcd etcd -- -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
build kwok kwok -- -ldflags "-s -w" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok
# Prometheus publishes release 3.N.P as module version v0.3NN.P; stamp the release, as its own build does.
prometheus=$(cd "$here/promtool" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
prometheus="3.$((10#${prometheus:4:2})).${prometheus##*.}"
build promtool promtool -- -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prometheus" \
  -o "$bin/promtool" github.com/prometheus/prometheus/cmd/promtool
# Kueue stamps its release into pkg/version as its own Makefile does. kueue/go.sum carries the hash of
# sigs.k8s.io/scheduler-library v0.1.0-alpha1 as Kueue v0.19.2's own go.sum records it: the checksum database,
# asked through the module proxy, answers 404 for that version, so without the line Go refuses the module.
kueue=$(cd "$here/kueue" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
build kueue kueue -- -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue" -o "$bin/kueue" \
  sigs.k8s.io/kueue/cmd/kueue
# Karpenter's kwok provider: its core controllers with a cloud provider that makes kwok Nodes. Karpenter v1.15.0
# needs Go >= 1.26.9, newer than the machine's Go: this one build runs on the toolchain go1.27.3, which the Go module
# proxy serves (fetched once into the module cache); every other tool stays on the local Go.
GOTOOLCHAIN=go1.27.3 build karpenter karpenter-kwok -- -ldflags "-s -w" -o "$bin/karpenter-kwok" \
  sigs.k8s.io/karpenter/kwok
build k8s kube-apiserver kube-controller-manager kube-scheduler kubectl -- -ldflags "$k8s_ldflags" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

# The Pulumi engine: the CLI of the release pulumi/go.mod pins, stamped with that release as its release build does
# (pulumi's .goreleaser.yml: -X .../version.Version=v<release>, tags osusergo,grpcnotrace).
pulumi=$(cd "$here/pulumi" && go list -m -f '{{.Version}}' github.com/pulumi/pulumi/pkg/v3)
build pulumi pulumi -- -tags osusergo,grpcnotrace \
  -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$pulumi" \
  -o "$bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
# Its Python language host is ours (the release's host module is not served): it runs the exec script of the same
# release's sdk/v3 module, installed beside it where the engine's host looks for it.
# `go mod download -json` fetches the module first: `go list -m` leaves Dir empty for a module not yet in the cache.
sdk=$(cd "$here/pulumi-language-python" && go mod download -json github.com/pulumi/pulumi/sdk/v3 \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$bin/pulumi-language-python-exec"
build pulumi-language-python pulumi-language-python -- -ldflags "-s -w -X main.version=${pulumi#v}" \
  -o "$bin/pulumi-language-python" ./cmd/pulumi-language-python

# The Kubernetes provider. Its module has no release tags: release 4.25.0 is tag v4.25.0 = commit f47bc2d6f199,
# required at that commit's pseudo-version. The engine loads the provider version the Python SDK asks for, so the
# lock must pin the same pulumi-kubernetes release.
k8s_provider=4.25.0
k8s_provider_commit=f47bc2d6f199
module=$(cd "$here/pulumi-kubernetes" && go mod download -json github.com/pulumi/pulumi-kubernetes/provider/v4 \
  | python3 -c 'import json, sys; module = json.load(sys.stdin); print(module["Version"], module["Dir"])')
if [[ "${module%% *}" != *-"$k8s_provider_commit" ]] \
  || ! grep -qx "pulumi-kubernetes==$k8s_provider" "$here/../../requirements.lock"; then
  echo "e2e tools: pulumi-kubernetes/go.mod must pin commit $k8s_provider_commit (release $k8s_provider) and" \
    "requirements.lock pulumi-kubernetes==$k8s_provider; change both together" >&2
  exit 2
fi
# Its main package embeds files its own build generates (generate.go): the committed schema with the release as
# its version, and the minified Terraform mapping. Generated from the module into git-ignored files, as that does.
cmd=$here/pulumi-kubernetes/cmd/pulumi-resource-kubernetes
python3 - "${module#* }/cmd/pulumi-resource-kubernetes" "$cmd" "$k8s_provider" <<'PY'
import json, pathlib, sys
source, target, version = map(pathlib.Path, sys.argv[1:])
schema = json.loads((source / "schema.json").read_text())
schema["version"] = str(version)
for name, data in {"schema-embed.json": schema,
                   "terraform-mapping-embed.json": json.loads((source / "terraform-mapping.json").read_text())}.items():
    text = json.dumps(data, separators=(",", ":"))
    if not (target / name).is_file() or (target / name).read_text() != text:
        (target / name).write_text(text)
PY
build pulumi-kubernetes pulumi-resource-kubernetes -- \
  -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$k8s_provider" \
  -o "$bin/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes
