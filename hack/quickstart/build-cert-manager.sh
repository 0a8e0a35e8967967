#!/usr/bin/env bash
# Builds cert-manager for the quickstart from the github.com/cert-manager/cert-manager
# root module that hack/tools/certmanager/go.mod pins (v1.21.1, the version
# clusterctl v1.13.6 installs by default), with nothing pulled:
#
#   quay.io/jetstack/cert-manager-controller:<v>   hack/tools/certmanager/cmd/controller
#   quay.io/jetstack/cert-manager-webhook:<v>      hack/tools/certmanager/cmd/webhook
#   quay.io/jetstack/cert-manager-cainjector:<v>   hack/tools/certmanager/cmd/cainjector
#   out/quickstart/repository/cert-manager/<v>/cert-manager.yaml   for clusterctl's cert-manager URL
#
# The three mains are the project's own (upstream's cmd/* modules are not
# served by the module proxy); docs/quickstart.md says what each does and
# leaves out. Binaries static, stamped with -X .../pkg/util.AppVersion;
# images FROM scratch, user 65532, /manager as entrypoint; cached like
# build-capi-images.sh (FORCE=1 rebuilds the images).
# The manifest: the module's deploy/crds, then namespace, service accounts,
# RBAC, the three Deployments, the webhook Service and webhook configurations
# (written here after the module's Helm chart with its default values; Helm
# is not available offline).
set -euo pipefail
# shellcheck source=hack/quickstart/lib.sh
source "$(dirname "$0")/lib.sh"
# with_progress: a cold compile logs that it is still running.
# shellcheck source=images/lib.sh
source "$QS_ROOT/images/lib.sh"

tools="$CAPCT_TOOLS/certmanager"
v=$(tool_version certmanager github.com/cert-manager/cert-manager)
registry=${CERT_MANAGER_REGISTRY:-quay.io/jetstack}
ns=cert-manager

step "resolve inputs"
mod=$(cd "$tools" && go mod download -json github.com/cert-manager/cert-manager | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "$mod/deploy/crds" ]] || die "cannot find github.com/cert-manager/cert-manager@$v in the module cache"
ldflags="-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=$( (cat "$tools/go.mod" "$tools/go.sum") | sha1sum | cut -d' ' -f1) -s -w"
key=$( { go version; echo "$ldflags"; cat "$tools/go.mod" "$tools/go.sum" "$tools"/cmd/*/*.go; } | hash_of)
bindir="$QS_CACHE/cert-manager/$v-$key"
log "cert-manager $v, inputs $key"

for name in controller webhook cainjector; do
  if [[ -x "$bindir/$name" ]]; then continue; fi
  step "go build $name"
  CGO_ENABLED=0 with_progress "go build $name" build_go_tool "$bindir/$name" "$tools" "./cmd/$name" -trimpath -ldflags "$ldflags"
done
for d in "$QS_CACHE"/cert-manager/*/; do
  [[ "${d%/}" == "$bindir" ]] || rm -rf "$d"
done

step "images"
for name in controller webhook cainjector; do
  sum=$(sha256sum < "$bindir/$name" | cut -c1-16)
  build_scratch_image "$registry/cert-manager-$name:$v" "$key-$sum" "$bindir/$name"
done

step "cert-manager.yaml"
dest="$QS_OUT/repository/cert-manager/$v"
mkdir -p "$dest"
{
  echo "# cert-manager $v for CAPCT's offline quickstart (hack/quickstart/build-cert-manager.sh)."
  echo "# CRDs: deploy/crds of github.com/cert-manager/cert-manager@$v; the rest after its Helm chart."
  for f in "$mod"/deploy/crds/*.yaml; do
    echo "---"
    grep -v '^---$' "$f"
  done
  cat <<YAML
---
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cert-manager
  namespace: $ns
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cert-manager-webhook
  namespace: $ns
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cert-manager-cainjector
  namespace: $ns
---
# The controller: the union of the chart's controller roles for the
# controllers that cmd/controller runs (issuers, clusterissuers, certificates,
# certificaterequests approver/CA/SelfSigned).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cert-manager-controller
rules:
- apiGroups: [cert-manager.io]
  resources: [issuers, issuers/status, clusterissuers, clusterissuers/status, certificates, certificates/status, certificates/finalizers, certificaterequests, certificaterequests/status, certificaterequests/finalizers]
  verbs: ["*"]
- apiGroups: [acme.cert-manager.io]
  resources: [orders, orders/status, orders/finalizers, challenges, challenges/status, challenges/finalizers]
  verbs: ["*"]
- apiGroups: [cert-manager.io]
  resources: [signers]
  resourceNames: [issuers.cert-manager.io/*, clusterissuers.cert-manager.io/*]
  verbs: [approve]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [pods, services, configmaps]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch]
- apiGroups: [gateway.networking.k8s.io]
  resources: [gateways, httproutes]
  verbs: [get, list, watch]
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [get, list, watch]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cert-manager-controller
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cert-manager-controller}
subjects:
- {kind: ServiceAccount, name: cert-manager, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cert-manager-cainjector
rules:
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [get, create, update, patch]
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations]
  verbs: [get, list, watch, update, patch]
- apiGroups: [apiregistration.k8s.io]
  resources: [apiservices]
  verbs: [get, list, watch, update, patch]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cert-manager-cainjector
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cert-manager-cainjector}
subjects:
- {kind: ServiceAccount, name: cert-manager-cainjector, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cert-manager-cainjector:leaderelection
  namespace: kube-system
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: cert-manager-cainjector:leaderelection
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "cert-manager-cainjector:leaderelection"}
subjects:
- {kind: ServiceAccount, name: cert-manager-cainjector, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cert-manager-webhook:dynamic-serving
  namespace: $ns
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, update, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: cert-manager-webhook:dynamic-serving
  namespace: $ns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "cert-manager-webhook:dynamic-serving"}
subjects:
- {kind: ServiceAccount, name: cert-manager-webhook, namespace: $ns}
---
apiVersion: v1
kind: Service
metadata:
  name: cert-manager-webhook
  namespace: $ns
spec:
  type: ClusterIP
  selector: {app.kubernetes.io/name: webhook, app.kubernetes.io/instance: cert-manager}
  ports:
  - {name: https, port: 443, protocol: TCP, targetPort: https}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager
  namespace: $ns
  labels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: controller}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/instance: cert-manager}
  template:
    metadata:
      labels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: controller}
    spec:
      serviceAccountName: cert-manager
      enableServiceLinks: false
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
      containers:
      - name: cert-manager-controller
        image: $registry/cert-manager-controller:$v
        imagePullPolicy: IfNotPresent
        args: [--v=2, "--cluster-resource-namespace=\$(POD_NAMESPACE)"]
        env:
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        ports:
        - {containerPort: 9403, name: http-healthz, protocol: TCP}
        livenessProbe:
          httpGet: {port: http-healthz, path: /livez, scheme: HTTP}
          initialDelaySeconds: 10
          periodSeconds: 10
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager-cainjector
  namespace: $ns
  labels: {app.kubernetes.io/name: cainjector, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: cainjector}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: cainjector, app.kubernetes.io/instance: cert-manager}
  template:
    metadata:
      labels: {app.kubernetes.io/name: cainjector, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: cainjector}
    spec:
      serviceAccountName: cert-manager-cainjector
      enableServiceLinks: false
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
      containers:
      - name: cert-manager-cainjector
        image: $registry/cert-manager-cainjector:$v
        imagePullPolicy: IfNotPresent
        args: [--v=2, --leader-election-namespace=kube-system]
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager-webhook
  namespace: $ns
  labels: {app.kubernetes.io/name: webhook, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: webhook}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: webhook, app.kubernetes.io/instance: cert-manager}
  template:
    metadata:
      labels: {app.kubernetes.io/name: webhook, app.kubernetes.io/instance: cert-manager, app.kubernetes.io/component: webhook}
    spec:
      serviceAccountName: cert-manager-webhook
      enableServiceLinks: false
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
      containers:
      - name: cert-manager-webhook
        image: $registry/cert-manager-webhook:$v
        imagePullPolicy: IfNotPresent
        args:
        - --v=2
        - --secure-port=10250
        - --dynamic-serving-ca-secret-namespace=\$(POD_NAMESPACE)
        - --dynamic-serving-ca-secret-name=cert-manager-webhook-ca
        - --dynamic-serving-dns-names=cert-manager-webhook,cert-manager-webhook.\$(POD_NAMESPACE),cert-manager-webhook.\$(POD_NAMESPACE).svc
        env:
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        ports:
        - {name: https, protocol: TCP, containerPort: 10250}
        - {name: healthcheck, protocol: TCP, containerPort: 6080}
        livenessProbe:
          httpGet: {path: /livez, port: healthcheck, scheme: HTTP}
          initialDelaySeconds: 60
          periodSeconds: 10
        readinessProbe:
          httpGet: {path: /healthz, port: healthcheck, scheme: HTTP}
          initialDelaySeconds: 5
          periodSeconds: 5
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: cert-manager-webhook
  annotations:
    cert-manager.io/inject-ca-from-secret: $ns/cert-manager-webhook-ca
webhooks:
- name: webhook.cert-manager.io
  rules:
  - apiGroups: [cert-manager.io]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [certificaterequests]
  admissionReviewVersions: [v1]
  matchPolicy: Equivalent
  timeoutSeconds: 30
  failurePolicy: Fail
  sideEffects: None
  clientConfig:
    service: {name: cert-manager-webhook, namespace: $ns, path: /mutate}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: cert-manager-webhook
  annotations:
    cert-manager.io/inject-ca-from-secret: $ns/cert-manager-webhook-ca
webhooks:
- name: webhook.cert-manager.io
  namespaceSelector:
    matchExpressions:
    - {key: cert-manager.io/disable-validation, operator: NotIn, values: ["true"]}
  rules:
  - apiGroups: [cert-manager.io, acme.cert-manager.io]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: ["*/*"]
  admissionReviewVersions: [v1]
  matchPolicy: Equivalent
  timeoutSeconds: 30
  failurePolicy: Fail
  sideEffects: None
  clientConfig:
    service: {name: cert-manager-webhook, namespace: $ns, path: /validate}
YAML
} > "$dest/cert-manager.yaml.tmp"
mv "$dest/cert-manager.yaml.tmp" "$dest/cert-manager.yaml"
log "wrote $dest/cert-manager.yaml ($(grep -c '^kind:' "$dest/cert-manager.yaml") objects)"
finish
