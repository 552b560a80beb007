{{- define "osrdyne.name" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "osrdyne.labels" -}}
app.kubernetes.io/name: osrdyne
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "osrdyne.selector" -}}
app.kubernetes.io/name: osrdyne
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "osrdyne.secret" -}}
{{- default (printf "%s-amqp" (include "osrdyne.name" .)) .Values.broker.existingSecret -}}
{{- end -}}

{{/* osrdyne.toml: the values above, with `config` merged over them. */}}
{{- define "osrdyne.config" -}}
{{- $w := .Values.workers -}}
{{- if not (has $w.mode (list "kubernetes" "keda" "hpa")) -}}
{{- fail (printf "workers.mode must be kubernetes, keda or hpa, not %q" $w.mode) -}}
{{- end -}}
{{- $section := dict
    "auth" "incluster"
    "image" $w.image
    "image_pull_policy" $w.pullPolicy
    "replicas" $w.replicas
    "resources" $w.resources
    "environment" $w.environment
    "amqp_uri_secret" (dict "name" (include "osrdyne.secret" .) "key" "worker-uri")
    "keda" (merge (dict "enabled" (eq $w.mode "keda")) $w.keda)
    "hpa" (merge (dict "enabled" (eq $w.mode "hpa")) $w.hpa) -}}
{{- if $w.command }}{{ $_ := set $section "command" $w.command }}{{ end -}}
{{- $base := dict
    "pool" .Values.pool
    "amqp" (dict "management_url" .Values.broker.managementUrl)
    "api" (dict "host" "0.0.0.0" "port" .Values.api.port)
    "driver" (dict "kind" "kubernetes" "kubernetes" $section) -}}
{{- toToml (mergeOverwrite $base (deepCopy .Values.config)) -}}
{{- end -}}
