{{- /* Egress policy of requests to user-chosen URLs (model sources, tool endpoints, guardrail
webhooks, the rollout classifier, OIDC issuers): the same egress.* values for every component that
makes such requests. Renders nothing when every list is empty (deny by default). */ -}}
{{- define "neuronetes.egressArgs" -}}
{{- with .Values.egress.allowCIDRs }}
- {{ printf "--egress-allow-cidrs=%s" (join "," .) | quote }}
{{- end }}
{{- with .Values.egress.allowHosts }}
- {{ printf "--egress-allow-hosts=%s" (join "," .) | quote }}
{{- end }}
{{- with .Values.egress.clusterCIDRs }}
- {{ printf "--egress-cluster-cidrs=%s" (join "," .) | quote }}
{{- end }}
{{- end -}}

{{- /* --oidc-allowed-issuers from gateway.oidc.allowedIssuers: ISSUER or ISSUER=NS|NS. */ -}}
{{- define "neuronetes.oidcIssuersArg" -}}
{{- $items := list }}
{{- range .Values.gateway.oidc.allowedIssuers }}
{{- if .namespaces }}
{{- $items = append $items (printf "%s=%s" .issuer (join "|" .namespaces)) }}
{{- else }}
{{- $items = append $items .issuer }}
{{- end }}
{{- end }}
{{- if $items }}
- {{ printf "--oidc-allowed-issuers=%s" (join "," $items) | quote }}
{{- end }}
{{- end -}}
