#!/usr/bin/env bash
# Build the Kubernetes stack the kubernetes tier runs, from its Go modules, once per version:
#
#   scripts/build_kubernetes.sh          # build what is missing, print where it is
#
# Versions come from scripts/kubernetes_versions.env (the one place they are pinned). Each
# program is built into $OSRDYNE_KUBERNETES_CACHE (default /var/cache/osrdyne-kubernetes)
# under a directory named by its version, so a second run builds nothing and a new pin builds
# beside the old one:
#   kubernetes-<v>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,
#                       kubectl}
#   kubernetes-<v>/pause          a static pause binary from the module's build/pause source
#   etcd-<v>/bin/etcd
#   keda-<v>/bin/{keda,keda-adapter}, keda-<v>/crd/ (its CustomResourceDefinitions)
#       with the scalers osrdyne writes triggers for (rabbitmq; cpu and memory, which KEDA
#       itself adds): each other scaler drags a cloud SDK in, about 700 of the 2600 packages
#       of a full build. OSRDYNE_KEDA_SCALERS=all builds KEDA with every one.
#   helm-<v>/bin/helm
# k8s.io/kubernetes requires its staging modules (k8s.io/api, ...) at v0.0.0 with replace
# lines that only hold inside its own repository (kubernetes/kubernetes#79384): each program
# is built inside a small wrapper module made here, with one replace line per staging module
# of that release (read from its go.mod) pinned to the matching v0.<minor>.<patch>. etcd's and
# KEDA's go.mod have replace lines too: etcd the same way, KEDA inside its downloaded module.
# Flags as the official builds: CGO off, the version stamped into the binaries.
# Prints, as its last line on stdout, OSRDYNE_KUBERNETES_BIN=<dir> (everything else on stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=kubernetes_versions.env
source "$here/kubernetes_versions.env"

CACHE=${OSRDYNE_KUBERNETES_CACHE:-/var/cache/osrdyne-kubernetes}
# No DWARF from the compiler: the linker drops it anyway (-s -w), and making it is about 7 %
# of a cold build's CPU (the binaries are the same; no rebuild is needed for it).
export GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" CGO_ENABLED=0 GOTOOLCHAIN=local
# The compiler collects its garbage less often (GOGC 400: 18 % less CPU on the standard
# library's build here), bounded by a soft memory limit per compile or link process.
export GOGC=400 GOMEMLIMIT=4GiB
KEDA_SCALERS=${OSRDYNE_KEDA_SCALERS:-rabbitmq}
[[ $KEDA_SCALERS =~ ^(all|[a-z0-9_]+(,[a-z0-9_]+)*)$ ]] || {
  echo "build_kubernetes: OSRDYNE_KEDA_SCALERS: scaler file names (rabbitmq,redis) or all" >&2
  exit 2
}
# Bump when the recipe below changes: a build made by an older one is made again.
RECIPE=1

log() { echo "build_kubernetes: $*" >&2; }
stamp_ok() { [[ -f $1/.built && $(cat "$1/.built") == "${2:-$RECIPE}" ]]; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

# A wrapper module in $1 requiring module $2 at $3, with the replace lines $4 (a file).
wrapper() {
  local dir=$1 module=$2 version=$3 replaces=$4
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module osrdyne.invalid/build"
    echo
    echo "go 1.24.0"
    echo
    echo "require $module $version"
    echo
    echo "replace ("
    cat "$replaces"
    echo ")"
  } >"$dir/go.mod"
}

build_kubernetes() {
  local v=$KUBERNETES_VERSION out=$CACHE/kubernetes-$KUBERNETES_VERSION started
  stamp_ok "$out" && return 0
  started=$(date +%s)
  local minor=${v#*.}; minor=${minor%%.*}
  local patch=${v##*.} work=$out.work
  log "building Kubernetes v$v (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl): about 13 min cold on 2 quiet cores"
  mkdir -p "$work"
  curl -fsS "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/v$v.mod" -o "$work/kubernetes.mod"
  # Every staging module of that release, pinned to its v0.<minor>.<patch>.
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 v0.'"$minor.$patch"'#p' \
    "$work/kubernetes.mod" >"$work/replaces"
  [[ -s $work/replaces ]] || { log "no staging replace lines in k8s.io/kubernetes v$v's go.mod"; exit 1; }
  wrapper "$work/module" k8s.io/kubernetes "v$v" "$work/replaces"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$v"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
  mkdir -p "$work/bin"
  (cd "$work/module" && go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$work/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl)
  # The pause container's program, from the module's own source (static: the image holds
  # nothing else).
  local src
  src=$(cd "$work/module" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  gcc -Os -static -Wall -Werror -DVERSION="v$v-osrdyne" -o "$work/pause" "$src/build/pause/linux/pause.c"
  strip "$work/pause"
  rm -rf "$out" && mkdir -p "$out"
  mv "$work/bin" "$work/pause" "$out/"
  rm -rf "$work"
  echo "$RECIPE" >"$out/.built"
  log "Kubernetes v$v built in $(elapsed "$started")"
}

build_etcd() {
  local v=$ETCD_VERSION out=$CACHE/etcd-$ETCD_VERSION started work
  stamp_ok "$out" && return 0
  started=$(date +%s) work=$out.work
  log "building etcd v$v"
  mkdir -p "$work"
  printf '\t%s => %s v%s\n' go.etcd.io/etcd/api/v3 go.etcd.io/etcd/api/v3 "$v" \
    go.etcd.io/etcd/client/pkg/v3 go.etcd.io/etcd/client/pkg/v3 "$v" \
    go.etcd.io/etcd/client/v3 go.etcd.io/etcd/client/v3 "$v" \
    go.etcd.io/etcd/pkg/v3 go.etcd.io/etcd/pkg/v3 "$v" >"$work/replaces"
  wrapper "$work/module" go.etcd.io/etcd/server/v3 "v$v" "$work/replaces"
  mkdir -p "$work/bin"
  (cd "$work/module" && go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out" && mkdir -p "$out" && mv "$work/bin" "$out/" && rm -rf "$work"
  echo "$RECIPE" >"$out/.built"
  log "etcd v$v built in $(elapsed "$started")"
}

# KEDA's scalers package and its trigger switch cut to the scalers in $KEDA_SCALERS (in the
# copy of its module in $1): the operator, its metrics server and those scalers are upstream's
# code unchanged.
keep_keda_scalers() {
  local src=$1 f kept=" scaler.go cpu_memory_scaler.go "
  for f in ${KEDA_SCALERS//,/ }; do
    [[ -f $src/pkg/scalers/${f}_scaler.go ]] || { log "KEDA has no scaler $f"; exit 2; }
    kept+="${f}_scaler.go "
  done
  for f in "$src"/pkg/scalers/*.go; do
    [[ $kept == *" ${f##*/} "* ]] || rm "$f"
  done
  python3 - "$src/pkg/scaling/scalers_builder.go" "$KEDA_SCALERS" <<'PY'
import re, sys
path, kept = sys.argv[1], sys.argv[2].split(",")
text = open(path).read()
start = text.index("\tswitch triggerType {\n") + len("\tswitch triggerType {\n")
end = text.index("\tdefault:\n", start)
cases = re.split(r"(?m)^(?=\tcase )", text[start:end])
keep = [c for c in cases if re.match(r'\tcase "(cpu|memory|%s)":' % "|".join(map(re.escape, kept)), c)]
if len(keep) != len(kept) + 2:
    sys.exit(f"KEDA's trigger switch: {len(keep)} of the cases for {kept} + cpu, memory found")
open(path, "w").write(text[:start] + "".join(keep) + text[end:])
PY
}

build_keda() {
  local v=$KEDA_VERSION out=$CACHE/keda-$KEDA_VERSION started work src recipe
  recipe="$RECIPE scalers:$KEDA_SCALERS"
  stamp_ok "$out" "$recipe" && return 0
  started=$(date +%s) work=$out.work
  log "building KEDA v$v (operator, metrics adapter)"
  mkdir -p "$work"
  # Its go.mod has replace lines: build inside a copy of the downloaded module (the module
  # cache is read-only), as its own Makefile does.
  src=$(cd "$work" && GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@v$v" \
    | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [[ -d $src ]] || { log "KEDA v$v: no module directory"; exit 1; }
  rm -rf "$work/src" && cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
  [[ $KEDA_SCALERS == all ]] || keep_keda_scalers "$work/src"
  local ldflags="-s -w -X github.com/kedacore/keda/v2/version.Version=$v"
  (cd "$work/src" && go build -trimpath -ldflags "$ldflags" -o "$work/bin/keda" ./cmd/operator \
    && go build -trimpath -ldflags "$ldflags" -o "$work/bin/keda-adapter" ./cmd/adapter)
  rm -rf "$out" && mkdir -p "$out"
  mv "$work/bin" "$out/" && cp -r "$work/src/config/crd/bases" "$out/crd"
  rm -rf "$work"
  echo "$recipe" >"$out/.built"
  log "KEDA v$v (scalers: $KEDA_SCALERS) built in $(elapsed "$started")"
}

build_helm() {
  local v=$HELM_VERSION out=$CACHE/helm-$HELM_VERSION started work
  stamp_ok "$out" && return 0
  started=$(date +%s) work=$out.work
  log "building Helm v$v"
  rm -rf "$work" && mkdir -p "$work/bin"
  # No replace lines: go install takes it as it is.
  GOBIN=$work/bin go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$v" "helm.sh/helm/v3/cmd/helm@v$v"
  rm -rf "$out" && mkdir -p "$out" && mv "$work/bin" "$out/" && rm -rf "$work"
  echo "$RECIPE" >"$out/.built"
  log "Helm v$v built in $(elapsed "$started")"
}

# Go's own tarball install, where a login shell would have put it on PATH.
command -v go >/dev/null || [[ ! -x /usr/local/go/bin/go ]] || PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { log "no go on PATH: Go 1.24 or newer builds the stack"; exit 1; }
command -v gcc >/dev/null || { log "no gcc on PATH: it builds the pause program"; exit 1; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9  # one build at a time (a set-up in the background and a test asking for it)
build_etcd
build_kubernetes
build_keda
build_helm
echo "OSRDYNE_KUBERNETES_BIN=$CACHE"
