#!/usr/bin/env bash
# Make sure a real single-node Kubernetes cluster runs on this machine, and print where it is.
#
#   scripts/ensure_kubernetes.sh            # build what is missing, start (or reuse) it
#   scripts/ensure_kubernetes.sh build      # only build the programs (scripts/build_kubernetes.sh)
#   scripts/ensure_kubernetes.sh status     # exit status 0 when it runs
#   scripts/ensure_kubernetes.sh --stop     # stop everything it started (its data is kept)
#   scripts/ensure_kubernetes.sh --purge    # stop, and delete its data and certificates
#
# What runs, each a process of this machine (versions: scripts/kubernetes_versions.env):
#   etcd                      127.0.0.1:12379 (data under $STATE/etcd, fsync off: a test cluster)
#   kube-apiserver            https://<node ip>:16443 (RBAC and Node authorization, service
#                             accounts, the aggregation layer for KEDA's metrics API)
#   kube-controller-manager   every controller (Deployments, ReplicaSets, garbage collector,
#                             HPA with a 5 s sync period), service-account credentials per
#                             controller
#   kube-scheduler
#   containerd                Debian's, a private instance on /run/osrdyne-kubernetes, CRI v1,
#                             overlayfs, runc with cgroupfs
#   kubelet                   node "osrdyne-node" on cgroup v1 (cgroupfs driver), swap allowed,
#                             image garbage collection off (images are imported, never pulled)
#   kube-proxy                iptables mode: pods reach the API server by its Service address
#   KEDA                      operator and metrics API server, out of the cluster, with their
#                             CRDs, registered as v1beta1.external.metrics.k8s.io
# The node's address is 10.250.0.1 on a bridge of its own (osrdyne-node: a kubelet refuses a
# loopback address; no dummy interface on these kernels); pods get 10.251.0.0/16 on the
# `osrdyne-pods` CNI bridge (Debian's containernetworking-plugins). No image can be pulled: the
# pause image is made here from the kubernetes module's own build/pause source, and the images
# of deploy/compose (built on osrdyne's dockerd, scripts/ensure_dockerd.sh) are imported into
# containerd, tagged with their image id; pods use `imagePullPolicy: Never`.
# The broker pods reach: $RABBITMQ_URL's host when it is not loopback, else the node address
# (RabbitMQ listens on every interface); a user `osrdyne-kubernetes` is made on it (guest may
# only log in from loopback) with a password kept under $STATE.
#
# Prints, as its last lines on stdout (everything else goes to stderr):
#   OSRDYNE_KUBECONFIG=<path>                   an admin kubeconfig (system:masters)
#   OSRDYNE_KUBERNETES_WORKER_IMAGE=<image>     the echo worker image, imported
#   OSRDYNE_KUBERNETES_CONTROLLER_IMAGE=<image> osrdyne's image (the controller), imported
#   OSRDYNE_KUBERNETES_AMQP_URL=<url>           the broker, as pods reach it
#   OSRDYNE_KUBERNETES_MANAGEMENT_URL=<url>     its management API, as pods reach it
#   OSRDYNE_KUBERNETES_NODE_IP=<ip>
#   OSRDYNE_KUBERNETES_BIN=<dir>                where kubectl (and the cluster's programs) are
#   OSRDYNE_HELM=<path>                         Helm, built from its module too
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/_quiet.sh"
# shellcheck source=kubernetes_versions.env
source "$here/kubernetes_versions.env"

STATE=${OSRDYNE_KUBERNETES_STATE:-/var/lib/osrdyne-kubernetes}
RUN=/run/osrdyne-kubernetes
LOGS=/var/log/osrdyne-kubernetes
CACHE=${OSRDYNE_KUBERNETES_CACHE:-/var/cache/osrdyne-kubernetes}
PKI=$STATE/pki
NODE=osrdyne-node
NODE_BRIDGE=osrdyne-node
NODE_IP=10.250.0.1
POD_CIDR=10.251.0.0/16
SERVICE_CIDR=10.252.0.0/16
API_SERVICE_IP=10.252.0.1
API_PORT=16443
ETCD_PORT=12379
KEDA_GRPC_PORT=19666
KEDA_METRICS_API_PORT=16444
CONTAINERD_SOCK=$RUN/containerd/containerd.sock
PAUSE_IMAGE=registry.k8s.io/pause:osrdyne
WAIT_SECONDS=${OSRDYNE_KUBERNETES_WAIT_SECONDS:-180}
# Bump when the cluster's set-up below changes: certificates and configuration are made anew
# (the data of etcd is kept).
RECIPE=1

K8S_BIN=$CACHE/kubernetes-$KUBERNETES_VERSION/bin
ETCD_BIN=$CACHE/etcd-$ETCD_VERSION/bin
KEDA_DIR=$CACHE/keda-$KEDA_VERSION
KUBECTL=$K8S_BIN/kubectl
ADMIN=$STATE/admin.kubeconfig

log() { echo "ensure_kubernetes: $*" >&2; }
die() { log "$*"; exit 1; }

# -- processes ------------------------------------------------------------------------------

# The pid of component $1 if it runs (its pidfile names a live process of that program).
running() {
  local pid
  pid=$(cat "$RUN/$1.pid" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2" || return 1
  echo "$pid"
}

# start NAME PROGRAM ARGS...: run it in the background (its own session), unless it runs.
start() {
  local name=$1 program=$2
  shift 2
  running "$name" "$program" >/dev/null && return 0
  log "starting $name"
  mkdir -p "$RUN" "$LOGS"
  # Not holding this script's lock (fd 9): a daemon that kept it would block every later run.
  setsid "$program" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  echo $! >"$RUN/$name.pid"
}

# stop NAME PROGRAM: SIGTERM, then SIGKILL after 20 s.
stop_one() {
  local name=$1 program=$2 pid i
  pid=$(running "$name" "$program") || { rm -f "$RUN/$name.pid"; return 0; }
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/$name.pid"
}

# wait_for WHAT COMMAND...: until the command succeeds, bounded; on failure show the log.
wait_for() {
  local what=$1 logname=$2 deadline=$((SECONDS + WAIT_SECONDS))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      log "$what: not ready after ${WAIT_SECONDS} s; the end of $LOGS/$logname.log:"
      tail -n 40 "$LOGS/$logname.log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

kubectl() { "$KUBECTL" --kubeconfig "$ADMIN" "$@"; }

# -- certificates ---------------------------------------------------------------------------

# ca NAME CN: a certificate authority (RSA 2048, ten years).
ca() {
  [[ -f $PKI/$1.crt ]] && return 0
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$2" \
    -keyout "$PKI/$1.key" -out "$PKI/$1.crt" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# cert NAME CA SUBJECT USAGE [SANS]: a certificate signed by CA; USAGE serverAuth, clientAuth
# or both (comma-separated), SANS like "DNS:localhost,IP:127.0.0.1".
cert() {
  local name=$1 authority=$2 subject=$3 usage=$4 sans=${5:-}
  [[ -f $PKI/$name.crt ]] && return 0
  local ext=$PKI/$name.ext
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$ext"
  openssl req -new -newkey rsa:2048 -nodes -subj "$subject" \
    -keyout "$PKI/$name.key" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$authority.crt" -CAkey "$PKI/$authority.key" \
    -CAcreateserial -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

# kubeconfig FILE CERT: a kubeconfig for the client certificate CERT (in $PKI).
kubeconfig() {
  local file=$1 who=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: osrdyne
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $who
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$who.crt")
    client-key-data: $(base64 -w0 "$PKI/$who.key")
contexts:
- name: osrdyne
  context: {cluster: osrdyne, user: $who}
current-context: osrdyne
EOF
  chmod 600 "$file"
}

make_pki() {
  if [[ -f $STATE/.recipe && $(cat "$STATE/.recipe") == "$RECIPE" && -f $ADMIN ]]; then
    return 0
  fi
  log "making certificates and configuration under $STATE"
  rm -rf "$PKI" && mkdir -p "$PKI" && chmod 700 "$PKI"
  ca ca kubernetes-ca
  ca front-proxy-ca kubernetes-front-proxy-ca
  ca keda-ca keda-ca
  cert apiserver ca /CN=kube-apiserver serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$API_SERVICE_IP,IP:$NODE_IP,IP:127.0.0.1"
  cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert admin ca "/O=system:masters/CN=osrdyne-admin" clientAuth
  cert controller-manager ca /CN=system:kube-controller-manager clientAuth
  cert scheduler ca /CN=system:kube-scheduler clientAuth
  cert kube-proxy ca /CN=system:kube-proxy clientAuth
  cert kubelet ca "/O=system:nodes/CN=system:node:$NODE" clientAuth
  cert kubelet-serving ca "/CN=$NODE" serverAuth "DNS:$NODE,IP:$NODE_IP"
  cert front-proxy-client front-proxy-ca /CN=front-proxy-client clientAuth
  # KEDA's operator and metrics server talk gRPC with mutual TLS from one directory
  # (ca.crt, tls.crt, tls.key): the operator serves, the metrics server calls.
  cert keda keda-ca /CN=keda-operator serverAuth,clientAuth \
    "DNS:localhost,DNS:keda-operator,DNS:keda-metrics-apiserver.keda.svc,IP:127.0.0.1,IP:$NODE_IP"
  cert keda-client ca /CN=keda-operator clientAuth
  mkdir -p "$PKI/keda-certs"
  cp "$PKI/keda-ca.crt" "$PKI/keda-certs/ca.crt"
  cp "$PKI/keda.crt" "$PKI/keda-certs/tls.crt"
  cp "$PKI/keda.key" "$PKI/keda-certs/tls.key"
  [[ -f $PKI/sa.key ]] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  kubeconfig "$ADMIN" admin
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler
  kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$STATE/kubelet.kubeconfig" kubelet
  kubeconfig "$STATE/keda.kubeconfig" keda-client
  echo "$RECIPE" >"$STATE/.recipe"
}

# -- the machine: packages, network, containerd ----------------------------------------------

install_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v openssl >/dev/null || missing+=(openssl)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    # RUNLEVEL=1: the packages' scripts must not start the system's own containerd.
    RUNLEVEL=1 apt_install "${missing[@]}"
  fi
}

network() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  ip addr show dev "$NODE_BRIDGE" | grep -q "inet $NODE_IP/" || ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
  mount --make-rshared / 2>/dev/null || true
  mkdir -p "$STATE/cni"
  cat >"$STATE/cni/10-osrdyne-pods.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "osrdyne-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "osrdyne-pods",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
               "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

containerd_up() {
  mkdir -p "$STATE/containerd" "$RUN/containerd"
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_unprivileged_ports = false
  # These VMs give root no CAP_SYS_RESOURCE: a process may not lower its oom_score_adj, and
  # runc fails every pod sandbox (-998) with "can't get final child's PID from pipe". Keep
  # each container's at or above containerd's own, as in unprivileged containers (kind).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
EOF
  start containerd "$(command -v containerd)" --config "$STATE/containerd/config.toml"
  wait_for "containerd" containerd ctr --address "$CONTAINERD_SOCK" version
}

ctr_k8s() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# An image archive (docker save's layout) of one layer holding the files of directory $1,
# running $2, tagged $3, into file $4.
image_archive() {
  local rootfs=$1 entrypoint=$2 tag=$3 out=$4 work layer_sum config_sum
  work=$(mktemp -d)
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
  layer_sum=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["%s"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$layer_sum" >"$work/config.json"
  config_sum=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config_sum.json"
  mkdir "$work/$layer_sum" && mv "$work/layer.tar" "$work/$layer_sum/layer.tar"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
    "$config_sum" "$tag" "$layer_sum" >"$work/manifest.json"
  tar -C "$work" -cf "$out" .
  rm -rf "$work"
}

pause_image() {
  ctr_k8s images ls -q | grep -qx "$PAUSE_IMAGE" && return 0
  local rootfs
  rootfs=$(mktemp -d)
  install -m 0755 "$CACHE/kubernetes-$KUBERNETES_VERSION/pause" "$rootfs/pause"
  image_archive "$rootfs" /pause "$PAUSE_IMAGE" "$STATE/pause.tar"
  rm -rf "$rootfs"
  quietly ctr_k8s images import --all-platforms "$STATE/pause.tar"
  ctr_k8s images label "$PAUSE_IMAGE" io.cri-containerd.pinned=pinned >/dev/null
}

# Import image $1 of osrdyne's dockerd into containerd as $1's name tagged with its image id;
# print that reference. Nothing is imported when the same id is already there.
import_image() {
  local name=$1 id ref
  id=$(docker image inspect --format '{{.Id}}' "$name:latest" 2>/dev/null) || {
    log "image $name:latest is not on osrdyne's dockerd ($DOCKER_HOST): build deploy/compose first (scripts/test.sh does)"
    return 1
  }
  id=${id#sha256:}
  ref=docker.io/library/$name:${id:0:12}
  if ! ctr_k8s images ls -q | grep -qx "$ref"; then
    log "importing $name (${id:0:12}) into the cluster's containerd"
    docker tag "$name:latest" "$name:${id:0:12}"
    docker save "$name:${id:0:12}" | ctr_k8s images import --all-platforms - >/dev/null
    docker rmi "$name:${id:0:12}" >/dev/null
  fi
  echo "$name:${id:0:12}"
}

# -- the control plane ------------------------------------------------------------------------

control_plane() {
  start etcd "$ETCD_BIN/etcd" --name osrdyne --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster osrdyne=http://127.0.0.1:12380 --unsafe-no-fsync \
    --quota-backend-bytes 2147483648 --log-level warn
  wait_for etcd etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode Node,RBAC \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
    --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --profiling=false --v 1
  wait_for kube-apiserver kube-apiserver kubectl get --raw /readyz

  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --horizontal-pod-autoscaler-sync-period 5s \
    --profiling=false --v 1
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v 1
}

# -- the node ---------------------------------------------------------------------------------

node() {
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
address: "$NODE_IP"
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: "unix://$CONTAINERD_SOCK"
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
resolvConf: /etc/resolv.conf
maxPods: 250
serializeImagePulls: false
# Imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
evictionPressureTransitionPeriod: 10s
# A test node: status and pod changes seen quickly.
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
shutdownGracePeriod: 0s
EOF
  start kubelet "$K8S_BIN/kubelet" --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$STATE/kubelet/root" \
    --cert-dir "$STATE/kubelet/pki" --hostname-override "$NODE" --node-ip "$NODE_IP" --v 1
  wait_for "the node" kubelet node_ready

  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$STATE/kube-proxy.kubeconfig"}
mode: iptables
clusterCIDR: "$POD_CIDR"
bindAddress: 127.0.0.1
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
hostnameOverride: "$NODE"
conntrack: {maxPerCore: 0}
EOF
  start kube-proxy "$K8S_BIN/kube-proxy" --config "$STATE/kube-proxy.yaml" --v 1
}

node_ready() {
  [[ $(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# -- KEDA, out of the cluster -------------------------------------------------------------------

keda() {
  kubectl apply --server-side --force-conflicts -f "$KEDA_DIR/crd" >/dev/null
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: keda}
---
# KEDA's metrics API server runs on this machine, not in a pod: its Service has no selector,
# and the one endpoint is the node's address (the aggregator routes to endpoints).
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  ports: [{name: https, port: 443, targetPort: $KEDA_METRICS_API_PORT}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: keda-metrics-apiserver-host
  namespace: keda
  labels: {kubernetes.io/service-name: keda-metrics-apiserver}
addressType: IPv4
ports: [{name: https, port: $KEDA_METRICS_API_PORT, protocol: TCP}]
endpoints: [{addresses: ["$NODE_IP"]}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: $(base64 -w0 "$PKI/keda-ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
---
# The HPA controller reads external metrics as the controller manager's service account.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: keda-external-metrics-reader}
rules:
- apiGroups: [external.metrics.k8s.io]
  resources: ["*"]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: keda-hpa-controller-external-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: keda-external-metrics-reader}
subjects: [{kind: ServiceAccount, name: horizontal-pod-autoscaler, namespace: kube-system}]
---
# KEDA runs as its own user (keda-client's certificate: CN keda-operator): everything it
# does in the cluster, and delegated authentication and authorization for its metrics API.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: keda-operator-cluster-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: keda-operator}]
EOF
  # Out of the cluster: KEDA's own user, every namespace watched, its objects in `keda`.
  export KUBECONFIG=$STATE/keda.kubeconfig WATCH_NAMESPACE= POD_NAMESPACE=keda
  export KEDA_CLUSTER_OBJECT_NAMESPACE=keda OPERATOR_NAME=keda-operator
  start keda-operator "$KEDA_DIR/bin/keda" \
    --leader-elect=false --metrics-bind-address 127.0.0.1:18080 \
    --health-probe-bind-address 127.0.0.1:18081 \
    --metrics-service-bind-address "127.0.0.1:$KEDA_GRPC_PORT" --cert-dir "$PKI/keda-certs" \
    --enable-cert-rotation=false --enable-webhook-patching=false \
    --enable-apiservice-patching=false --zap-log-level info
  start keda-metrics-apiserver "$KEDA_DIR/bin/keda-adapter" \
    --secure-port "$KEDA_METRICS_API_PORT" --bind-address "$NODE_IP" --cert-dir "$PKI/keda-certs" \
    --tls-cert-file "$PKI/keda-certs/tls.crt" --tls-private-key-file "$PKI/keda-certs/tls.key" \
    --metrics-service-address "127.0.0.1:$KEDA_GRPC_PORT" \
    --metrics-service-grpc-authority localhost --port 18082 \
    --lister-kubeconfig "$STATE/keda.kubeconfig" \
    --authentication-kubeconfig "$STATE/keda.kubeconfig" \
    --authorization-kubeconfig "$STATE/keda.kubeconfig" \
    --kubeconfig "$STATE/keda.kubeconfig" --v 1
  unset KUBECONFIG WATCH_NAMESPACE POD_NAMESPACE KEDA_CLUSTER_OBJECT_NAMESPACE OPERATOR_NAME
  wait_for "KEDA's metrics API" keda-metrics-apiserver \
    kubectl get --raw /apis/external.metrics.k8s.io/v1beta1
}

# -- the broker as pods reach it --------------------------------------------------------------

broker() {
  local url=${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/}
  local mgmt=${RABBITMQ_MANAGEMENT_URL:-http://guest:guest@127.0.0.1:15672/}
  url=${url%%,*}
  local host port mhost mport admin password
  host=$(python3 -c 'import sys,urllib.parse as u;print(u.urlsplit(sys.argv[1]).hostname)' "$url")
  port=$(python3 -c 'import sys,urllib.parse as u;print(u.urlsplit(sys.argv[1]).port or 5672)' "$url")
  mhost=$(python3 -c 'import sys,urllib.parse as u;print(u.urlsplit(sys.argv[1]).hostname)' "$mgmt")
  mport=$(python3 -c 'import sys,urllib.parse as u;print(u.urlsplit(sys.argv[1]).port or 15672)' "$mgmt")
  admin=$(python3 -c 'import sys,urllib.parse as u;s=u.urlsplit(sys.argv[1]);print(u.unquote(s.username or "guest")+":"+u.unquote(s.password or "guest"))' "$mgmt")
  [[ $host == 127.* || $host == localhost ]] && host=$NODE_IP
  [[ $mhost == 127.* || $mhost == localhost ]] && mhost=$NODE_IP
  if [[ ! -f $STATE/broker-password ]]; then
    head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$STATE/broker-password"
    chmod 600 "$STATE/broker-password"
  fi
  password=$(cat "$STATE/broker-password")
  local api=${mgmt%/}
  api=${api#*://}; api=${api#*@}
  curl -fsS -o /dev/null -u "$admin" "http://$api/api/overview" || {
    log "no RabbitMQ management API at http://$api/ (RABBITMQ_MANAGEMENT_URL):" \
      "scripts/ensure_broker.sh starts one"
    exit 1
  }
  # The user pods log in as (guest may only log in from loopback): every right on "/", and
  # the tags a controller needs (policies; the broker's figures) for one run in a pod.
  curl -fsS -u "$admin" -X PUT -H 'content-type: application/json' \
    -d "{\"password\":\"$password\",\"tags\":\"policymaker,monitoring\"}" \
    "http://$api/api/users/osrdyne-kubernetes" >/dev/null
  curl -fsS -u "$admin" -X PUT -H 'content-type: application/json' \
    -d '{"configure":".*","write":".*","read":".*"}' \
    "http://$api/api/permissions/%2F/osrdyne-kubernetes" >/dev/null
  BROKER_URL="amqp://osrdyne-kubernetes:$password@$host:$port/%2F"
  MANAGEMENT_URL="http://osrdyne-kubernetes:$password@$mhost:$mport/"
}

# -- stop ---------------------------------------------------------------------------------------

# Every container the kubelet left (it does not stop its pods when it stops): their tasks
# killed and removed, their network torn down, their mounts released.
pods_down() {
  [[ -S $CONTAINERD_SOCK ]] || return 0
  local task
  for task in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
  done
  sleep 1
  for task in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks delete -f "$task" >/dev/null 2>&1 || true
  done
  for task in $(ctr_k8s containers ls -q 2>/dev/null); do
    ctr_k8s containers delete "$task" >/dev/null 2>&1 || true
  done
}

release_mounts() {
  local target
  # Deepest first.
  for target in $(awk -v a="$STATE/" -v b="$RUN/" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$target" 2>/dev/null || true
  done
  local ns
  for ns in /var/run/netns/cni-*; do
    [[ -e $ns ]] || continue
    ip netns delete "$(basename "$ns")" 2>/dev/null || true
  done
}

network_down() {
  ip link del osrdyne-pods 2>/dev/null || true
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  # The bridge plugin's masquerading chains (CNI-...), and kube-proxy's rules.
  local chain
  for chain in $(iptables -t nat -S 2>/dev/null | sed -n 's/^-N \(CNI-[^ ]*\)$/\1/p'); do
    iptables -t nat -S POSTROUTING | grep -- "-j $chain" | sed 's/^-A/-D/' | while read -r rule; do
      # shellcheck disable=SC2086
      iptables -t nat $rule 2>/dev/null || true
    done
    iptables -t nat -F "$chain" 2>/dev/null || true
    iptables -t nat -X "$chain" 2>/dev/null || true
  done
  [[ -x $K8S_BIN/kube-proxy ]] && "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  rm -rf "$STATE/cni/ipam"
}

stop_all() {
  stop_one keda-metrics-apiserver keda-adapter
  stop_one keda-operator "$KEDA_DIR/bin/keda "
  stop_one kube-proxy kube-proxy
  stop_one kubelet kubelet
  pods_down
  stop_one containerd containerd
  # containerd's shims outlive it: any left are ours (their socket under $RUN).
  pkill -KILL -f "containerd-shim-runc-v2 -namespace k8s.io -id .* -address $CONTAINERD_SOCK" 2>/dev/null || true
  stop_one kube-scheduler kube-scheduler
  stop_one kube-controller-manager kube-controller-manager
  stop_one kube-apiserver kube-apiserver
  stop_one etcd etcd
  release_mounts
  network_down
}

# -- main -------------------------------------------------------------------------------------

case ${1:-} in
  build)
    exec "$here/build_kubernetes.sh"
    ;;
  status)  # exit status 0 when the API server runs (and answers)
    running kube-apiserver kube-apiserver >/dev/null && kubectl get --raw /readyz >/dev/null 2>&1
    exit
    ;;
  --stop)
    stop_all
    exit 0
    ;;
  --purge)
    stop_all
    rm -rf "$STATE" "$RUN" "$LOGS"
    exit 0
    ;;
  "") ;;
  *)
    echo "usage: $0 [build|status|--stop|--purge]" >&2
    exit 2
    ;;
esac

[[ $(id -u) == 0 ]] || die "runs as root (it starts a kubelet, containerd and iptables rules)"
"$here/build_kubernetes.sh" >/dev/null
install_packages
mkdir -p "$STATE" "$RUN" "$LOGS"
exec 9>"$RUN/.lock"
flock 9  # one start at a time (parallel test workers share the cluster)
make_pki
network
control_plane
containerd_up
pause_image
node
broker
eval "export $("$here/ensure_dockerd.sh" | tail -n 1)"
worker_image=$(import_image osrdyne-echo-worker)
controller_image=$(import_image osrdyne)
keda
log "the cluster answers on https://$NODE_IP:$API_PORT (kubectl --kubeconfig $ADMIN)"
echo "OSRDYNE_KUBECONFIG=$ADMIN"
echo "OSRDYNE_KUBERNETES_WORKER_IMAGE=$worker_image"
echo "OSRDYNE_KUBERNETES_CONTROLLER_IMAGE=$controller_image"
echo "OSRDYNE_KUBERNETES_AMQP_URL=$BROKER_URL"
echo "OSRDYNE_KUBERNETES_MANAGEMENT_URL=$MANAGEMENT_URL"
echo "OSRDYNE_KUBERNETES_NODE_IP=$NODE_IP"
echo "OSRDYNE_KUBERNETES_BIN=$K8S_BIN"
echo "OSRDYNE_HELM=$CACHE/helm-$HELM_VERSION/bin/helm"
