{{/* The bundled MySQL's name: <release>-mysql (the parent chart relies on it). */}}
{{- define "mysql.fullname" -}}
{{- printf "%s-mysql" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mysql.secretName" -}}
{{- .Values.auth.existingSecret | default (include "mysql.fullname" .) -}}
{{- end -}}

{{- define "mysql.labels" -}}
app.kubernetes.io/name: mysql
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: audit-store
app.kubernetes.io/part-of: resurgo
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mysql.selectorLabels" -}}
app.kubernetes.io/name: mysql
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Userinfo part of a URL: urlquery writes a space as "+", which userinfo keeps literally. */}}
{{- define "mysql.urlQuote" -}}
{{- urlquery . | replace "+" "%20" -}}
{{- end -}}

{{/* The audit store URL Resurgo reads (its `[audit] url`), for this MySQL. Call with
(dict "root" $ "password" PLAIN_PASSWORD). */}}
{{- define "mysql.url" -}}
{{- $v := .root.Values -}}
{{- printf "mysql+pymysql://%s:%s@%s:%d/%s" (include "mysql.urlQuote" $v.auth.username) (include "mysql.urlQuote" .password) (include "mysql.fullname" .root) (int $v.service.port) $v.auth.database -}}
{{- end -}}
