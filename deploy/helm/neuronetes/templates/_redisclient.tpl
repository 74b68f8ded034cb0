{{- /* Redis client settings of a component (internal/redisconn flags). Each takes
(dict "ctx" $ "redis" <the component's redis values>). */ -}}

{{- /* Container args: user, TLS, CA file, server name. */ -}}
{{- define "neuronetes.redisClientArgs" -}}
{{- $t := .ctx.Values.redis.tls -}}
{{- with .redis.username }}
- {{ printf "--redis-username=%s" . | quote }}
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
{{- with .redis.passwordSecret.name }}
- name: NEURONETES_REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ . }}, key: {{ $.redis.passwordSecret.key }}}}
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
