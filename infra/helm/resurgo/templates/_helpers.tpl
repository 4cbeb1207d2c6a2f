{{/* ------------------------------------------------------------------ names, labels */}}
{{- define "resurgo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "resurgo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "resurgo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ include "resurgo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: resurgo
{{- end -}}

{{/* selector labels; call with (dict "root" $ "component" "worker" ["cluster" "x"]) */}}
{{- define "resurgo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "resurgo.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .cluster }}
resurgo-cluster: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* all labels of a component's objects; same argument as resurgo.selectorLabels */}}
{{- define "resurgo.componentLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: resurgo
{{ include "resurgo.selectorLabels" . }}
{{- end -}}

{{- define "resurgo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "resurgo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ------------------------------------------------------------------ images */}}
{{/* "repository:tag" from an image map; a tag is required and "latest" is refused. */}}
{{- define "resurgo.imageRef" -}}
{{- $tag := toString (required (printf "image tag of %s is required" .repository) .tag) -}}
{{- if or (eq $tag "latest") (eq $tag "") -}}
{{- fail (printf "image %s: pin a tag, not %q" .repository $tag) -}}
{{- end -}}
{{- printf "%s:%s" .repository $tag -}}
{{- end -}}

{{/* ------------------------------------------------------------------ Temporal */}}
{{- define "resurgo.temporalAddress" -}}
{{- if .Values.temporal.address -}}
{{- .Values.temporal.address -}}
{{- else if .Values.temporalDev.enabled -}}
{{- printf "%s-temporal:7233" (include "resurgo.fullname" .) -}}
{{- else -}}
{{- fail "temporal.address is required when temporalDev.enabled is false" -}}
{{- end -}}
{{- end -}}

{{/* ------------------------------------------------------------------ audit store */}}
{{/* JSON {secret, key}: the Secret and key holding the whole audit URL (password included),
the bundled MySQL's or audit.external's. The URL reaches Resurgo's config as a file
(RESURGO_AUDIT__URL_FILE): nothing assembles it in the pod. */}}
{{- define "resurgo.auditSecret" -}}
{{- if .Values.mysql.enabled -}}
{{- $secret := .Values.mysql.auth.existingSecret | default (printf "%s-mysql" .Release.Name) -}}
{{- dict "secret" $secret "key" "url" | toJson -}}
{{- else -}}
{{- $e := .Values.audit.external -}}
{{- /* Values of charts before the URL Secret: fail with the way forward, not a pod that
cannot connect. */ -}}
{{- range $old := list "host" "port" "database" "user" "passwordKey" -}}
{{- if hasKey $e $old -}}
{{- fail (printf "audit.external.%s is no longer read: the Secret audit.external.existingSecret must now hold the whole audit URL (mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE, user and password URL-quoted) under the key audit.external.urlKey; see the upgrade note in values.yaml" $old) -}}
{{- end -}}
{{- end -}}
{{- $secret := required "audit.external.existingSecret (a Secret holding the whole audit URL) is required when mysql.enabled is false" $e.existingSecret -}}
{{- dict "secret" $secret "key" $e.urlKey | toJson -}}
{{- end -}}
{{- end -}}

{{- define "resurgo.auditDir" -}}/var/run/secrets/resurgo/audit{{- end -}}

{{- define "resurgo.auditEnv" -}}
- name: RESURGO_AUDIT__URL_FILE
  value: {{ printf "%s/url" (include "resurgo.auditDir" .) | quote }}
{{- end -}}

{{- define "resurgo.auditVolume" -}}
{{- $a := include "resurgo.auditSecret" . | fromJson -}}
- name: audit-url
  secret:
    secretName: {{ $a.secret | quote }}
    defaultMode: 0440
    items:
      - key: {{ $a.key | quote }}
        path: url
{{- end -}}

{{- define "resurgo.auditMount" -}}
- name: audit-url
  mountPath: {{ include "resurgo.auditDir" . }}
  readOnly: true
{{- end -}}

{{/* Temporal TLS files and API key, from existing Secrets (values temporal.tls, .apiKey). */}}
{{- define "resurgo.temporalTlsDir" -}}/var/run/secrets/resurgo/temporal-tls{{- end -}}
{{- define "resurgo.temporalApiKeyDir" -}}/var/run/secrets/resurgo/temporal-api-key{{- end -}}

{{/* "true" when a TLS file is mounted: enabled, a Secret, and at least one key named. */}}
{{- define "resurgo.temporalTlsMounted" -}}
{{- $t := .Values.temporal.tls -}}
{{- if and $t.enabled $t.existingSecret (or $t.caKey $t.certKey $t.keyKey) -}}true{{- end -}}
{{- end -}}

{{- define "resurgo.temporalTlsFiles" -}}
{{- $t := .Values.temporal.tls -}}
{{- if include "resurgo.temporalTlsMounted" . -}}
{{- range $item := list (list "tls_ca_file" $t.caKey) (list "tls_cert_file" $t.certKey) (list "tls_key_file" $t.keyKey) }}
{{- if index $item 1 }}
{{ index $item 0 }} = {{ printf "%s/%s" (include "resurgo.temporalTlsDir" $) (index $item 1) | quote }}
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "resurgo.temporalEnv" -}}
{{- if and .Values.temporal.apiKey.existingSecret (not .Values.temporal.tls.enabled) -}}
{{- fail "temporal.apiKey needs temporal.tls.enabled (the key never travels in clear)" -}}
{{- end -}}
{{- if .Values.temporal.apiKey.existingSecret }}
- name: RESURGO_TEMPORAL__API_KEY_FILE
  value: {{ printf "%s/api-key" (include "resurgo.temporalApiKeyDir" .) | quote }}
{{- end }}
{{- end -}}

{{- define "resurgo.temporalVolumes" -}}
{{- $t := .Values.temporal.tls -}}
{{- if include "resurgo.temporalTlsMounted" . }}
- name: temporal-tls
  secret:
    secretName: {{ $t.existingSecret | quote }}
    defaultMode: 0440
    items:
      {{- range $k := list $t.caKey $t.certKey $t.keyKey }}
      {{- if $k }}
      - key: {{ $k | quote }}
        path: {{ $k | quote }}
      {{- end }}
      {{- end }}
{{- end }}
{{- with .Values.temporal.apiKey.existingSecret }}
- name: temporal-api-key
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.temporal.apiKey.key | quote }}
        path: api-key
{{- end }}
{{- end -}}

{{- define "resurgo.temporalMounts" -}}
{{- if include "resurgo.temporalTlsMounted" . }}
- name: temporal-tls
  mountPath: {{ include "resurgo.temporalTlsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.temporal.apiKey.existingSecret }}
- name: temporal-api-key
  mountPath: {{ include "resurgo.temporalApiKeyDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Env, volumes and mounts every Resurgo container has. */}}
{{- define "resurgo.commonEnv" -}}
- name: RESURGO_CONFIG
  value: /etc/resurgo/resurgo.toml
{{ include "resurgo.auditEnv" . }}
{{- include "resurgo.temporalEnv" . }}
{{- end -}}

{{- define "resurgo.commonVolumes" -}}
- name: config
  configMap:
    name: {{ include "resurgo.fullname" . }}-config
- name: tmp
  emptyDir: {}
- name: state
  emptyDir: {}
{{ include "resurgo.auditVolume" . }}
{{- include "resurgo.temporalVolumes" . }}
{{- end -}}

{{- define "resurgo.commonMounts" -}}
- name: config
  mountPath: /etc/resurgo
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: state
  mountPath: /var/lib/resurgo
{{ include "resurgo.auditMount" . }}
{{- include "resurgo.temporalMounts" . }}
{{- end -}}

{{- define "resurgo.podCommon" -}}
serviceAccountName: {{ include "resurgo.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* ------------------------------------------------------------------ clusters */}}
{{/* JSON {"items": [...]}: each entry of .Values.clusters merged over clusterDefaults, checked. */}}
{{- define "resurgo.clusters" -}}
{{- $items := list -}}
{{- $seen := dict -}}
{{- range $i, $raw := .Values.clusters -}}
{{- $c := mergeOverwrite (deepCopy $.Values.clusterDefaults) (deepCopy $raw) -}}
{{- $name := required (printf "clusters[%d].name is required" $i) $c.name -}}
{{- if not (regexMatch "^[a-z][a-z0-9_]{0,39}$" $name) -}}
{{- fail (printf "cluster name %q must match ^[a-z][a-z0-9_]{0,39}$ (a Slurm ClusterName)" $name) -}}
{{- end -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "cluster %q is listed twice" $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- if eq $c.mode "local" -}}
{{- $_ := required (printf "cluster %s: slurm.existingSecret (munge key + slurm.conf) is required in local (in-cluster) mode" $name) $c.slurm.existingSecret -}}
{{- else if eq $c.mode "ssh" -}}
{{- $_ := required (printf "cluster %s: ssh.host is required in ssh mode" $name) $c.ssh.host -}}
{{- $_ := required (printf "cluster %s: ssh.existingSecret (private key + known_hosts) is required in ssh mode" $name) $c.ssh.existingSecret -}}
{{- else -}}
{{- fail (printf "cluster %s: mode must be local or ssh, not %q" $name $c.mode) -}}
{{- end -}}
{{- $_ := set $c "slug" (replace "_" "-" $name) -}}
{{- $items = append $items $c -}}
{{- end -}}
{{- dict "items" $items | toJson -}}
{{- end -}}

{{/* Slurm access of one cluster's pods: volumes. Call with (dict "root" $ "c" $cluster). */}}
{{- define "resurgo.slurmVolumes" -}}
{{- $c := .c -}}
{{- if eq $c.mode "local" }}
- name: slurm
  secret:
    secretName: {{ $c.slurm.existingSecret | quote }}
    defaultMode: 0440
    items:
      - key: {{ $c.slurm.mungeKeyKey | quote }}
        path: munge.key
      - key: {{ $c.slurm.slurmConfKey | quote }}
        path: slurm.conf
- name: munge-socket
  emptyDir: {}
- name: munge-state
  emptyDir: {}
{{- else }}
- name: ssh
  secret:
    secretName: {{ $c.ssh.existingSecret | quote }}
    defaultMode: 0440
    items:
      - key: {{ $c.ssh.privateKeyKey | quote }}
        path: {{ $c.ssh.privateKeyKey | quote }}
      - key: {{ $c.ssh.knownHostsKey | quote }}
        path: known_hosts
{{- end }}
{{- with $c.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "resurgo.slurmMounts" -}}
{{- $c := .c -}}
{{- if eq $c.mode "local" }}
- name: slurm
  mountPath: {{ printf "/etc/resurgo/slurm/%s" $c.name | quote }}
  readOnly: true
- name: munge-socket
  mountPath: /run/munge
- name: munge-state
  mountPath: /run/resurgo-munge
{{- else }}
- name: ssh
  mountPath: {{ printf "/etc/resurgo/ssh/%s" $c.name | quote }}
  readOnly: true
{{- end }}
{{- with $c.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "resurgo.slurmEnv" -}}
{{- $c := .c -}}
{{- if eq $c.mode "local" }}
- name: RESURGO_MUNGE_KEY_FILE
  value: {{ printf "/etc/resurgo/slurm/%s/munge.key" $c.name | quote }}
- name: SLURM_CONF
  value: {{ printf "/etc/resurgo/slurm/%s/slurm.conf" $c.name | quote }}
{{- end }}
{{- end -}}

{{/* The /metrics port of a worker, controller or watchdog (metrics.ports.<process>; 0: off). */}}
{{- define "resurgo.metricsPort" -}}
{{- dig "ports" .process 0 (.root.Values.metrics | default dict) | int -}}
{{- end }}

{{/* $RESURGO_METRICS_PORT and the named container port `metrics` (the PodMonitor's), when on. */}}
{{- define "resurgo.metricsEnv" -}}
{{- $port := include "resurgo.metricsPort" . | int -}}
{{- if $port }}
- name: RESURGO_METRICS_PORT
  value: {{ $port | quote }}
{{- end }}
{{- end }}

{{- define "resurgo.metricsContainerPort" -}}
{{- $port := include "resurgo.metricsPort" . | int -}}
{{- if $port }}
ports:
  - name: metrics
    containerPort: {{ $port }}
    protocol: TCP
{{- end }}
{{- end }}
