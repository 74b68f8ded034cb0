{{- /* Redis client settings of a component (internal/redisconn flags). Each takes
(dict "ctx" $ "redis" <the component's redis values> "component" <gateway|dispatcher|controller>).
On the bundled Redis (neuronetes.redisBundledFor) the component is its generated user, with the
password from <fullname>-redis-users; else the values' username and passwordSecret. */ -}}

{{- /* Container args: user, TLS, CA file, server name. */ -}}
{{- define "neuronetes.redisClientArgs" -}}
{{- $t := .ctx.Values.redis.tls -}}
{{- if include "neuronetes.redisBundledFor" . }}
- {{ printf "--redis-username=%s" (include "neuronetes.redisBundledUser" .component) | quote }}
{{- else if .redis.username }}
- {{ printf "--redis-username=%s" .redis.username | quote }}
{{- end }}
{{- if $t.enabled }}
- --redis-tls
{{- with $t.caSecret.name }}
- {{ printf "--redis-ca-file=/etc/neuronetes/redis-ca/%s" $t.caSecret.key | quote }}
{{- end }}
{{- with $t.serverName }}
- {{ printf "--redis-server-name=%s" . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* Container env: the password from its Secret. */ -}}
{{- define "neuronetes.redisClientEnv" -}}
{{- if include "neuronetes.redisBundledFor" . }}
- name: NEURONETES_REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "neuronetes.redisUsersSecret" .ctx }}, key: {{ .component }}}}
{{- else if .redis.passwordSecret.name }}
- name: NEURONETES_REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .redis.passwordSecret.name }}, key: {{ .redis.passwordSecret.key }}}}
{{- end }}
{{- end -}}

{{- /* Container volumeMount of the CA Secret. */ -}}
{{- define "neuronetes.redisClientMount" -}}
{{- $t := .ctx.Values.redis.tls -}}
{{- if and $t.enabled $t.caSecret.name }}
- {name: redis-ca, mountPath: /etc/neuronetes/redis-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- /* Pod volume of the CA Secret. */ -}}
{{- define "neuronetes.redisClientVolume" -}}
{{- $t := .ctx.Values.redis.tls -}}
{{- if and $t.enabled $t.caSecret.name }}
- name: redis-ca
  secret: {secretName: {{ $t.caSecret.name }}}
{{- end }}
{{- end -}}
