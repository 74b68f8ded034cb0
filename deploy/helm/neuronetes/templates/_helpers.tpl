{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "neuronetes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified release name; every object name starts with it. */}}
{{- define "neuronetes.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "neuronetes.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "neuronetes.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "neuronetes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "neuronetes.name" . }}
app.kubernetes.io/part-of: neuronetes
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of a component; pass (dict "ctx" $ "component" "controller"). */}}
{{- define "neuronetes.selectorLabels" -}}
app.kubernetes.io/name: {{ include "neuronetes.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference of a component; pass (dict "ctx" $ "name" "driver"): <registry>/<name>:<tag>,
or <registry>/<name>@<digest> when image.digests names the component. */}}
{{- define "neuronetes.image" -}}
{{- $repo := printf "%s/%s" (trimSuffix "/" .ctx.Values.image.registry) .name -}}
{{- include "neuronetes.imageRef" (dict "ctx" .ctx "repo" $repo "name" .name) -}}
{{- end -}}

{{/* <repo>@<digest> when image.digests[name] is set, else <repo>:<image.tag>. */}}
{{- define "neuronetes.imageRef" -}}
{{- with index (.ctx.Values.image.digests | default dict) .name -}}
{{- printf "%s@%s" $.repo . -}}
{{- else -}}
{{- printf "%s:%s" .repo (toString .ctx.Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Image of the injected sidecar. */}}
{{- define "neuronetes.sidecarImage" -}}
{{- if .Values.sidecar.repository -}}
{{- include "neuronetes.imageRef" (dict "ctx" . "repo" .Values.sidecar.repository "name" "sidecar") -}}
{{- else -}}
{{- include "neuronetes.image" (dict "ctx" . "name" "sidecar") -}}
{{- end -}}
{{- end -}}

{{/* Service account names. */}}
{{- define "neuronetes.controllerSA" -}}{{ include "neuronetes.fullname" . }}-controller{{- end -}}
{{/* The driver and the node agent run in separate DaemonSets, each with its own account. */}}
{{- define "neuronetes.driverSA" -}}{{ include "neuronetes.fullname" . }}-driver{{- end -}}
{{- define "neuronetes.nodeagentSA" -}}{{ include "neuronetes.fullname" . }}-nodeagent{{- end -}}

{{/* Selector labels of a per-node pod; pass (dict "ctx" $ "pod" "driver"|"nodeagent"). Both keep
app.kubernetes.io/component=node (the node NetworkPolicy, metrics Service and ServiceMonitor
select it); neuronetes.io/node-pod tells the two DaemonSets apart. */}}
{{- define "neuronetes.nodePodLabels" -}}
{{ include "neuronetes.selectorLabels" (dict "ctx" .ctx "component" "node") }}
neuronetes.io/node-pod: {{ .pod }}
{{- end -}}

{{/* Scheduling fields shared by the driver and node agent pods (values node.*). */}}
{{- define "neuronetes.nodeScheduling" -}}
terminationGracePeriodSeconds: 10
{{- with .Values.node.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- include "neuronetes.pullSecrets" . }}
{{- /* A null key removes a default label; helm upgrade --reuse-values keeps such keys. */}}
{{- $selector := dict }}
{{- range $k, $v := .Values.node.nodeSelector }}
{{- if not (kindIs "invalid" $v) }}{{- $_ := set $selector $k $v }}{{- end }}
{{- end }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.node.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.node.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Webhook Service name (also the certificate's DNS name). */}}
{{- define "neuronetes.webhookService" -}}{{ include "neuronetes.fullname" . }}-controller{{- end -}}

{{/* Secret holding the webhook certificate in helm and secret TLS modes. */}}
{{- define "neuronetes.webhookSecret" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{- .Values.webhook.tls.secretName -}}
{{- else -}}
{{- include "neuronetes.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* Redis address given to injected sidecars. */}}
{{- define "neuronetes.redisAddress" -}}
{{- if .Values.redis.bundled.enabled -}}
{{- printf "%s-redis.%s.svc:6379" (include "neuronetes.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- .Values.redis.address -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets block. */}}
{{- define "neuronetes.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Gateway names: the API Service (also its DNS name) and the service account. */}}
{{- define "neuronetes.gatewayService" -}}{{ include "neuronetes.fullname" . }}-gateway{{- end -}}
{{- define "neuronetes.gatewaySA" -}}{{ include "neuronetes.fullname" . }}-gateway{{- end -}}

{{/* Redis of the gateway's shared pins, session activity and quotas: gateway.redis.address, else
the chart's Redis; empty when gateway.redis.enabled is false (each replica keeps its own). */}}
{{- define "neuronetes.gatewayRedis" -}}
{{- if .Values.gateway.redis.enabled -}}
{{- default (include "neuronetes.redisAddress" .) .Values.gateway.redis.address -}}
{{- end -}}
{{- end -}}

{{/* The node agent's CRIU staging directory (nodeagent.checkpoint.workDir, else the node agent's
default), a hostPath at the same path: containerd's runc shim on the node writes and reads it. */}}
{{- define "neuronetes.checkpointWorkDir" -}}
{{- .Values.nodeagent.checkpoint.workDir | default "/dev/shm/neuronetes-checkpoint" | trimSuffix "/" -}}
{{- end -}}

{{/* The Secret holding the checkpoint manifest signing key (key "key"). */}}
{{- define "neuronetes.checkpointSigningSecret" -}}
{{- .Values.nodeagent.checkpoint.signingKeySecret | default (printf "%s-checkpoint-signing" (include "neuronetes.fullname" .)) -}}
{{- end -}}


{{- /* The namespaces, space-separated, where the controller reads Model source Secrets by a Role:
controller.watchNamespace, else controller.modelSourceNamespaces; empty: every namespace (a
ClusterRole). */ -}}
{{- define "neuronetes.modelSourceNamespaces" -}}
{{- if .Values.controller.watchNamespace -}}{{ .Values.controller.watchNamespace }}{{- else -}}{{ join " " .Values.controller.modelSourceNamespaces }}{{- end -}}
{{- end -}}

{{- /* "true" when the controller resolves Model source credentials for the node agents
(controller/modelcreds: copies in the release namespace, --model-source-namespace, served to the
node agents by its endpoint --model-source-addr, with the webhook's certificate): the controller,
the node agent and the webhook run and, when the chart writes RBAC, the admission policy that
confines the controller's Secret writes in the release namespace to the copies is rendered (RBAC
cannot limit create by name). Otherwise a Model with a spec.source.secretRef fails on the nodes. */ -}}
{{- define "neuronetes.modelSourceCopies" -}}
{{- $confined := or (not .Values.rbac.create) .Values.rbac.admissionPolicies -}}
{{- if and .Values.controller.enabled .Values.nodeagent.enabled .Values.webhook.enabled $confined -}}true{{- end -}}
{{- end -}}

{{- /* "true" when the gateway authenticates API keys: the controller then publishes their hashes in
the release namespace (controller/apikeys) and the gateway reads those, never a Secret. */ -}}
{{- define "neuronetes.apiKeyHashes" -}}
{{- if and .Values.gateway.enabled (eq .Values.gateway.auth "required") -}}true{{- end -}}
{{- end -}}
