{{- /* The bundled Redis' ACL users (templates/redis-users.yaml). Each component's rules are the
ones its Go package returns (gateway/redisacl, dispatcher/redisacl, controller/redisusers);
deploy/helm's TestRedisBundledACL renders them and compares. */ -}}

{{- define "neuronetes.redisUsersSecret" -}}
{{- printf "%s-redis-users" (include "neuronetes.fullname" .) -}}
{{- end -}}

{{- /* The ACL user of a component in the bundled Redis. */ -}}
{{- define "neuronetes.redisBundledUser" -}}
{{- printf "neuronetes-%s" . -}}
{{- end -}}

{{- /* "true" when a component (dict "ctx" $ "redis" <its redis values>) connects to the bundled Redis
with the chart's generated user: the bundled Redis is on and the component names neither its own
address nor a password Secret. */ -}}
{{- define "neuronetes.redisBundledFor" -}}
{{- if and .ctx.Values.redis.bundled.enabled (not .redis.address) (not .redis.passwordSecret.name) -}}true{{- end -}}
{{- end -}}

{{- define "neuronetes.redisSession" -}}+hello +auth +ping +client|setname +select{{- end -}}

{{- /* gateway/redisacl.ACLRules(prefix) */ -}}
{{- define "neuronetes.redisACL.gateway" -}}
resetkeys ~{{ . }}* resetchannels nocommands {{ include "neuronetes.redisSession" . }} +evalsha +eval +time +get +set +pexpire +zadd +zrem +zremrangebyscore +zremrangebyrank +zcard +zscore +hmget +hset +getex
{{- end -}}

{{- /* dispatcher/redisacl.ACLRules(prefix) */ -}}
{{- define "neuronetes.redisACL.dispatcher" -}}
resetkeys ~{{ . }}* resetchannels nocommands {{ include "neuronetes.redisSession" . }} +evalsha +eval +time +get +set +hget +hmget +hset +hincrby +hdel +pexpire +hgetall +del +zadd +zremrangebyscore +zcard +multi +exec
{{- end -}}

{{- /* controller/redisusers.ACLRules() */ -}}
{{- define "neuronetes.redisACL.controller" -}}
resetkeys resetchannels nocommands {{ include "neuronetes.redisSession" . }} +acl|setuser +acl|deluser +acl|users
{{- end -}}

{{- /* "true" when the controller manages the namespaces' sidecar users (--sidecar-redis-users): the
webhook injects sidecars, controller.redis.manageSidecarUsers is on, the controller has a Redis user
(the bundled one's, or controller.redis.passwordSecret on your Redis), and, when the chart writes
RBAC, the admission policy that confines its Secret writes is rendered (RBAC cannot limit create by
name). */ -}}
{{- define "neuronetes.manageSidecarUsers" -}}
{{- $c := .Values.controller.redis -}}
{{- $confined := or (not .Values.rbac.create) .Values.rbac.admissionPolicies -}}
{{- if and .Values.webhook.enabled $c.manageSidecarUsers (or .Values.redis.bundled.enabled $c.passwordSecret.name) $confined -}}true{{- end -}}
{{- end -}}

{{- /* The Secret of each namespace holding its sidecars' Redis user (--sidecar-redis-secret). */ -}}
{{- define "neuronetes.sidecarRedisSecret" -}}neuronetes-sidecar-redis{{- end -}}
