{{/* The chart name, or nameOverride. */}}
{{- define "haptor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The object name prefix: fullnameOverride, the release name when it contains the chart
name, else <release>-<chart>. */}}
{{- define "haptor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels of every object (the component label is added per object). */}}
{{- define "haptor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "haptor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: haptor
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What selects the controller's objects (with app.kubernetes.io/component: controller). */}}
{{- define "haptor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "haptor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The controller pods' selector. */}}
{{- define "haptor.controllerSelectorLabels" -}}
{{ include "haptor.selectorLabels" . }}
app.kubernetes.io/component: controller
{{- end }}

{{/* The HAProxy pods' selector, which is also the config's podSelector. The name is the
Ingress library's podSelector (app.kubernetes.io/name: haproxy); the instance keeps two
releases in one namespace apart. */}}
{{- define "haptor.haproxySelectorLabels" -}}
app.kubernetes.io/name: haproxy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: haproxy
{{- end }}

{{/* The HAProxy objects' labels. */}}
{{- define "haptor.haproxyLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "haptor.haproxySelectorLabels" . }}
app.kubernetes.io/version: {{ .Values.haproxy.image.tag | quote }}
app.kubernetes.io/part-of: haptor
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The controller image. */}}
{{- define "haptor.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret with the Data Plane API credentials. */}}
{{- define "haptor.credentialsSecret" -}}
{{- .Values.haproxy.credentials.existingSecret | default (printf "%s-dataplane" (include "haptor.fullname" .)) }}
{{- end }}

{{/* Whether the controller creates the Data Plane API credentials Secret: no Secret of
yours and no password given. */}}
{{- define "haptor.credentialsGenerated" -}}
{{- if and (not .Values.haproxy.credentials.existingSecret) (not .Values.haproxy.credentials.password) }}true{{ end }}
{{- end }}

{{/* Where the webhook's certificate comes from: certManager (a Certificate, CA injected),
secret (your kubernetes.io/tls Secret with webhook.caBundle), or selfIssued (the controller
issues it, keeps it in a Secret and fills caBundle). */}}
{{- define "haptor.webhookCertificateSource" -}}
{{- if .Values.webhook.certManager.enabled }}certManager
{{- else if or .Values.webhook.certificate.existingSecret .Values.webhook.caBundle }}secret
{{- else }}selfIssued
{{- end }}
{{- end }}

{{/* The Secret with the webhook's certificate, mounted by the controller (cert-manager's or
yours). */}}
{{- define "haptor.webhookSecret" -}}
{{- .Values.webhook.certificate.existingSecret | default (printf "%s-webhook-tls" (include "haptor.fullname" .)) }}
{{- end }}

{{/* The Secret the controller keeps its self-issued webhook CA and certificate in. */}}
{{- define "haptor.webhookIssuedSecret" -}}
{{- printf "%s-webhook-certificate" (include "haptor.fullname" .) }}
{{- end }}

{{/* The webhook timeout, checked: the API server allows 1..30 s, and the controller answers
2 s earlier. */}}
{{- define "haptor.webhookTimeout" -}}
{{- $t := int .Values.webhook.timeoutSeconds }}
{{- if or (lt $t 3) (gt $t 30) }}
{{- fail (printf "webhook.timeoutSeconds must be between 3 and 30, not %d" $t) }}
{{- end }}
{{- $t }}
{{- end }}

{{/*
haproxy.version, checked: X.Y as a string (an unquoted 2.10 reads as the number 2.1).
*/}}
{{- define "haptor.haproxyVersion" -}}
{{- $v := .Values.haproxy.version -}}
{{- if not (kindIs "string" $v) -}}
{{- fail (printf "haproxy.version must be a quoted X.Y such as \"3.0\", not the number %v" $v) }}
{{- end -}}
{{- if not (regexMatch "^[0-9]+\\.[0-9]+$" $v) -}}
{{- fail (printf "haproxy.version must be X.Y such as \"3.0\", not %q" $v) }}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/*
image.haproxyVersion, checked: X.Y as a string.
*/}}
{{- define "haptor.imageHaproxyVersion" -}}
{{- $v := .Values.image.haproxyVersion -}}
{{- if not (kindIs "string" $v) -}}
{{- fail (printf "image.haproxyVersion must be a quoted X.Y such as \"3.2\", not %v" $v) }}
{{- end -}}
{{- if not (regexMatch "^[0-9]+\\.[0-9]+$" $v) -}}
{{- fail (printf "image.haproxyVersion must be X.Y such as \"3.2\", not %q" $v) }}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/*
Fails unless the controller can check configurations for the HAProxy pods' version: the
image's own haproxy (of the line image.haproxyVersion) when controller.haproxyCheckers is
empty, else the checker listed for that version (haptor run would report every render a
version mismatch, never checking it with another version).
*/}}
{{- define "haptor.checkHaproxyCheckers" -}}
{{- $checkers := .Values.controller.haproxyCheckers | default dict -}}
{{- $own := include "haptor.imageHaproxyVersion" . -}}
{{- $target := $own -}}
{{- if .Values.haproxy.version }}{{ $target = include "haptor.haproxyVersion" . }}{{ end -}}
{{- range $version, $path := $checkers -}}
{{- if not (regexMatch "^[0-9]+\\.[0-9]+$" $version) -}}
{{- fail (printf "controller.haproxyCheckers: %q is not a version X.Y (quote it: \"3.0\")" $version) }}
{{- end -}}
{{- if not $path -}}
{{- fail (printf "controller.haproxyCheckers.%s names no haproxy binary" $version) }}
{{- end -}}
{{- end -}}
{{- if and $checkers (not (hasKey $checkers $target)) -}}
{{- fail (printf "controller.haproxyCheckers has no checker for %s, the HAProxy version (haproxy.version): add \"%s\": PATH" $target $target) }}
{{- end -}}
{{- if and (not $checkers) (ne $target $own) -}}
{{- fail (printf "haproxy.version %s: the controller image's haproxy checks %s configurations only (image.haproxyVersion); use a controller image built for %s (docker build --build-arg DEBIAN_SUITE=..., then set image.haproxyVersion) or set controller.haproxyCheckers.\"%s\" to a haproxy %s in the controller image" $target $own $target $target $target) }}
{{- end -}}
{{- end -}}

{{/* The hardened container securityContext of every container of the chart. */}}
{{- define "haptor.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The pod securityContext of every pod of the chart. */}}
{{- define "haptor.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The rules haptor needs on the resources the Ingress library watches, which are namespaced:
granted cluster-wide by the ClusterRole, or in watchNamespace by a Role there.
*/}}
{{- define "haptor.rules.namespacedWatches" -}}
# watchedResources.ingresses (src/drivers/kube/resources.rs); get: the Ingress status
# writer (src/drivers/kube/ingress_status.rs) reads an Ingress before clearing its status,
# so the clear carries the resourceVersion it read.
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get", "list", "watch"]
# status.loadBalancer.ingress of the Ingresses the templates served (ingress_status.rs,
# a merge patch of the status subresource).
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses/status"]
  verbs: ["patch"]
# Kubernetes Events: about the config (LeadershipGained, ConfigInvalid, ...;
# src/drivers/kube/events.rs) in haptor's namespace, IngressIgnored or
# IngressPartlyServed about an Ingress and ServicePartlyServed about a Service in the object's
# own namespace (ingress_status.rs). kube-rs's Recorder creates an Event
# and merge-patches a repeat of it into a series.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# watchedResources.services (resources.rs); also the Service of --publish-service
# (ingress_status.rs: one Service, watched with a metadata.name field selector) and the uid
# of a Service a ServicePartlyServed Event is about (a list with a metadata.name field
# selector).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch"]
# watchedResources.endpointslices (resources.rs).
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
# watchedResources.tlsSecrets (fieldSelector type=kubernetes.io/tls) and .authSecrets
# (labelSelector haptor.dev/basic-auth=true) (resources.rs); also the Data Plane API
# credentials Secret of spec.credentialsSecretRef (src/drivers/kube/credentials.rs: one
# Secret, listed and watched with a metadata.name field selector) and the Secret an HTTP
# resource's auth.secretRef names (src/drivers/kube/http_credentials.rs: listed with a
# metadata.name field selector at each fetch).
#
# Kubernetes RBAC cannot restrict a list or watch of Secrets by type, label or field
# selector: it grants list/watch of Secrets or it does not. So this rule lets haptor list
# and watch ALL Secrets of the cluster (of watchNamespace in a namespaced install),
# although the library only asks the API server for the TLS-typed and the labelled ones
# (and haptor caches only those).
#
# Tighter scoping is not possible with this haptor yet. The usual way — a namespaceSelector
# on the watched Secrets, this rule dropped, and a Role + RoleBinding granting list/watch
# on secrets in each selected namespace — does not work today: haptor watches every
# resource cluster-wide even when it has a namespaceSelector (resources.rs filters the
# namespaces itself), and RBAC authorizes a cluster-wide list or watch only through a
# ClusterRoleBinding, never through per-namespace RoleBindings. It needs per-namespace
# watches in resources.rs first. Until then the only narrower choice is a config without
# tlsSecrets and authSecrets (no TLS, no basic auth): it can drop this rule, keeping
# list/watch on secrets in haptor's own namespace (a Role rule) if it sets
# credentialsSecretRef, whose watch is namespaced.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch"]
{{- if .Values.gateway.enabled }}
# The Gateway API library (gateway.enabled): its watchedResources gateways, httproutes,
# grpcroutes, tlsroutes and tcproutes (resources.rs: list and watch); get: the Gateway API
# status writer reads an object before writing its status, so the write carries the
# resourceVersion it read. referencegrants: the library reads them to allow a route's
# backendRef or a Gateway's certificateRef into another namespace (list, watch; get as
# above, for a ReferenceGrant a status condition names).
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gateways", "httproutes", "grpcroutes", "tlsroutes", "tcproutes", "referencegrants"]
  verbs: ["get", "list", "watch"]
# status.conditions, status.listeners and status.addresses of the Gateways, and
# status.parents of the routes, the Gateway API library served: the status writer gets the
# status subresource, then patches it (server-side apply or a merge patch) or updates it (a
# PUT with the resourceVersion it read, where a patch cannot remove another controller's
# entry).
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gateways/status", "httproutes/status", "grpcroutes/status", "tlsroutes/status", "tcproutes/status"]
  verbs: ["get", "patch", "update"]
{{- end }}
{{- end }}

{{/* The rules on cluster-scoped resources: always a ClusterRole. */}}
{{- define "haptor.rules.clusterScoped" -}}
# watchedResources.ingressclasses (resources.rs).
- apiGroups: ["networking.k8s.io"]
  resources: ["ingressclasses"]
  verbs: ["list", "watch"]
# A watched resource with a namespaceSelector (resources.rs: a metadata-only watch of
# Namespaces, for their labels). The shipped library sets none; tests/api_server/run_rbac.rs sets one
# on its Ingresses to show this rule is needed then.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- if .Values.gateway.enabled }}
# The Gateway API library (gateway.enabled): its watchedResources.gatewayclasses
# (resources.rs: list and watch; get: the status writer reads one before writing its
# status). The Namespaces rule above also serves its listeners' allowedRoutes namespace
# selectors (the library reads the Namespaces' labels from that watch).
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gatewayclasses"]
  verbs: ["get", "list", "watch"]
# status.conditions (Accepted) of the GatewayClasses of gateway.controllerName: got, then
# patched or updated, as the Gateways' status.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gatewayclasses/status"]
  verbs: ["get", "patch", "update"]
{{- end }}
{{- end }}

{{/*
Fails unless gateway.ports can be served: each a port 1..65535 given once, whose container
port (P + gateway.portOffset) is one the non-root HAProxy pods can bind (1024..65535) and no
other port of theirs; with ingress.enabled none may be a Service port of the Ingress library
(haproxy.service.httpPort, httpsPort): one Service cannot send a port to two.
*/}}
{{- define "haptor.checkGatewayPorts" -}}
{{- $offset := int .Values.gateway.portOffset -}}
{{- $h := .Values.haproxy -}}
{{- $taken := dict (toString (int $h.ports.status)) "haproxy.ports.status" (toString (int $h.dataplane.port)) "haproxy.dataplane.port" -}}
{{- if .Values.ingress.enabled -}}
{{- $_ := set $taken (toString (int $h.ports.http)) "haproxy.ports.http" -}}
{{- $_ := set $taken (toString (int $h.ports.https)) "haproxy.ports.https" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $p := .Values.gateway.ports -}}
{{- $port := int $p -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "gateway.ports: %v is not a port (1..65535)" $p) }}
{{- end -}}
{{- if hasKey $seen (toString $port) -}}
{{- fail (printf "gateway.ports lists %d twice" $port) }}
{{- end -}}
{{- $_ := set $seen (toString $port) true -}}
{{- $container := add $port $offset -}}
{{- if or (lt $container 1024) (gt $container 65535) -}}
{{- fail (printf "gateway.ports %d + gateway.portOffset %d = %d: the HAProxy pods (non-root) bind 1024..65535 only" $port $offset $container) }}
{{- end -}}
{{- with get $taken (toString $container) -}}
{{- fail (printf "gateway.ports %d + gateway.portOffset %d = %d is %s already" $port $offset $container .) }}
{{- end -}}
{{- if and $.Values.ingress.enabled (or (eq $port (int $h.service.httpPort)) (eq $port (int $h.service.httpsPort))) -}}
{{- fail (printf "gateway.ports %d is a port of the Ingress library on the HAProxy Service (haproxy.service.httpPort %d, httpsPort %d): with ingress.enabled and gateway.enabled, give the Gateway listeners other ports (e.g. gateway.ports={8080,8443}) or move the Ingress ones" $port (int $h.service.httpPort) (int $h.service.httpsPort)) }}
{{- end -}}
{{- end -}}
{{- end -}}
