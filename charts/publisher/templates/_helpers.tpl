{{/* The release's full name, bounded to 63 characters. */}}
{{- define "trafficmap-publisher.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "trafficmap-publisher.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trafficmap-publisher.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trafficmap-publisher.serviceAccountName" -}}
{{- default (include "trafficmap-publisher.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
trafficmap-publisher.xdsTLSMode is how the xDS port is secured: "secret" when
xds.tls.secretName is set, else xds.tls.mode (generate, cert-manager or plaintext).
*/}}
{{- define "trafficmap-publisher.xdsTLSMode" -}}
{{- if .Values.xds.tls.secretName -}}
secret
{{- else if has .Values.xds.tls.mode (list "generate" "cert-manager" "plaintext") -}}
{{- .Values.xds.tls.mode -}}
{{- else -}}
{{- fail (printf "xds.tls.mode %q: must be generate, cert-manager or plaintext (or set xds.tls.secretName)" .Values.xds.tls.mode) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the xDS port's tls.crt, tls.key and ca.crt; "" in plaintext mode. */}}
{{- define "trafficmap-publisher.xdsTLSSecret" -}}
{{- $mode := include "trafficmap-publisher.xdsTLSMode" . -}}
{{- if eq $mode "secret" -}}
{{- .Values.xds.tls.secretName -}}
{{- else if ne $mode "plaintext" -}}
{{- printf "%s-xds-tls" (include "trafficmap-publisher.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Whether the xDS port requires client certificates (mutual TLS): "true" or "". */}}
{{- define "trafficmap-publisher.xdsMutualTLS" -}}
{{- $mode := include "trafficmap-publisher.xdsTLSMode" . -}}
{{- if or (and (eq $mode "secret") .Values.xds.tls.clientCA) (has $mode (list "generate" "cert-manager")) -}}
true
{{- end -}}
{{- end -}}

{{/*
trafficmap-publisher.volumes are the publisher's pod volumes (the xDS TLS Secret, without
the CA's key); a gateway chart that includes the container in sidecar mode includes these in
its pod's volumes.
*/}}
{{- define "trafficmap-publisher.volumes" -}}
{{- with include "trafficmap-publisher.xdsTLSSecret" . -}}
- name: xds-tls
  secret:
    secretName: {{ . }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- if include "trafficmap-publisher.xdsMutualTLS" $ }}
      - {key: ca.crt, path: ca.crt}
      {{- end }}
{{- end }}
{{- end -}}

{{/*
trafficmap-publisher.container is the publisher's container spec. In sidecar mode a gateway
chart that has this chart as a dependency includes it in its pod's containers list, passing
this chart's context, and sets serviceAccountName to this chart's ServiceAccount; with
xds.bindAddress 127.0.0.1 the Envoy in the same pod reaches xDS over loopback.
*/}}
{{- define "trafficmap-publisher.container" -}}
name: publisher
image: "{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  - run
  {{- with .Values.publisher.gateway }}
  - --gateway={{ . }}
  {{- end }}
  {{- with .Values.publisher.gatewaySection }}
  - --gateway-section={{ . }}
  {{- end }}
  {{- with .Values.publisher.hostTemplate }}
  - --host-template={{ . }}
  {{- end }}
  {{- with .Values.publisher.namespaces }}
  - --namespace={{ join "," . }}
  {{- end }}
  {{- with .Values.publisher.publisherName }}
  - --publisher-name={{ . }}
  {{- end }}
  {{- with .Values.publisher.takeOverFrom }}
  - --take-over-from={{ . }}
  {{- end }}
  {{- range .Values.publisher.hostnameEntitlements }}
  - --hostname-entitlement={{ required "publisher.hostnameEntitlements[].domain is required" .domain }}={{ join "," (required "publisher.hostnameEntitlements[].namespaces is required" .namespaces) }}
  {{- end }}
  - --sinks={{ join "," .Values.publisher.sinks }}
  - --require-route-accepted={{ .Values.publisher.requireRouteAccepted }}
  - --require-xds-ack={{ .Values.publisher.requireXDSAck }}
  - --xds-min-clients={{ .Values.publisher.xdsMinClients }}
  - --no-positive-policy={{ .Values.publisher.noPositivePolicy }}
  - --teardown-timeout={{ .Values.publisher.teardownTimeout }}
  - --rewrite-hostname={{ .Values.publisher.rewriteHostname }}
  - --backend-kind={{ .Values.publisher.backendKind }}
  - --route-settle={{ .Values.publisher.routeSettle }}
  - --resolve-interval={{ .Values.publisher.resolve.interval }}
  - --resolve-min-ttl={{ .Values.publisher.resolve.minTTL }}
  - --resolve-max-ttl={{ .Values.publisher.resolve.maxTTL }}
  - --xds-address={{ .Values.xds.bindAddress }}:{{ .Values.xds.port }}
  - --xds-listener-address={{ .Values.xds.listenerAddress }}
  {{- with .Values.xds.departedGrace }}
  - --xds-departed-grace={{ . }}
  {{- end }}
  {{- with .Values.xds.limits }}
  {{- with .maxNames }}
  - --xds-max-names={{ . }}
  {{- end }}
  {{- with .maxRequestBytes }}
  - --xds-max-request-bytes={{ . }}
  {{- end }}
  {{- with .maxStreamsPerConnection }}
  - --xds-max-streams-per-connection={{ . }}
  {{- end }}
  {{- with .maxConnectionsPerClient }}
  - --xds-max-connections-per-client={{ . }}
  {{- end }}
  {{- end }}
  {{- if include "trafficmap-publisher.xdsTLSSecret" . }}
  - --xds-tls-cert=/etc/publisher/xds-tls/tls.crt
  - --xds-tls-key=/etc/publisher/xds-tls/tls.key
  {{- if include "trafficmap-publisher.xdsMutualTLS" . }}
  - --xds-client-ca=/etc/publisher/xds-tls/ca.crt
  {{- end }}
  {{- end }}
  {{- range .Values.xds.clientNamespaces }}
  {{- if not (include "trafficmap-publisher.xdsMutualTLS" $) }}
  {{- fail "xds.clientNamespaces needs mutual TLS (xds.tls.mode generate or cert-manager, or secretName with clientCA)" }}
  {{- end }}
  - --xds-client-namespaces={{ . }}
  {{- end }}
  - --http-address=:{{ .Values.httpPort }}
  {{- with .Values.debug.address }}
  - --debug-address={{ . }}
  {{- end }}
  {{- if .Values.leaderElection.enabled }}
  - --leader-elect=true
  - --leader-election-id={{ .Values.leaderElection.leaseName }}
  {{- end }}
  - --log-format={{ .Values.publisher.logFormat }}
  - --log-level={{ .Values.publisher.logLevel }}
  {{- range .Values.publisher.extraArgs }}
  - {{ . }}
  {{- end }}
env:
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
ports:
  - name: xds
    containerPort: {{ .Values.xds.port }}
    protocol: TCP
  - name: http
    containerPort: {{ .Values.httpPort }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: http
readinessProbe:
  httpGet:
    path: /readyz
    port: http
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- if include "trafficmap-publisher.xdsTLSSecret" . }}
volumeMounts:
  - name: xds-tls
    mountPath: /etc/publisher/xds-tls
    readOnly: true
{{- end }}
{{- end -}}

{{/* The RBAC rules the publisher needs in each watched namespace. */}}
{{- define "trafficmap-publisher.namespacedRules" }}
- apiGroups: [ome.io]
  resources: [trafficmaps]
  # patch: the finalizer ome.io/trafficmap-publisher (added before the first write for a
  # map, removed once its published state is torn down)
  verbs: [get, list, watch, patch]
- apiGroups: [ome.io]
  resources: [trafficmaps/status]
  verbs: [patch]
- apiGroups: [ome.io]
  resources: [inferenceservices]
  verbs: [get, list, watch, patch]
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
{{- if ne .Values.publisher.backendKind "service-externalname" }}
# the endpointslice backend kind (docs/reference/backends.md)
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
{{- if eq .Values.publisher.backendKind "envoy-gateway-backend" }}
- apiGroups: [gateway.envoyproxy.io]
  resources: [backends]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if not (has "httproute" .Values.publisher.sinks) }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- end }}

{{/* The cluster-scoped RBAC rules (the optional fleet-drain taint sources). */}}
{{- define "trafficmap-publisher.clusterRules" }}
{{- if eq .Values.publisher.backendKind "auto" }}
# --backend-kind auto reads the parent Gateway's GatewayClass controllerName (the Gateway
# may be in a namespace the publisher does not watch)
- apiGroups: [gateway.networking.k8s.io]
  resources: [gateways, gatewayclasses]
  verbs: [get, list, watch]
{{- end }}
- apiGroups: [modelplane.ai]
  resources: [inferenceclusters]
  verbs: [get, list, watch]
- apiGroups: [ome.io]
  resources: [workloadclusters]
  verbs: [get, list, watch]
{{- end }}
