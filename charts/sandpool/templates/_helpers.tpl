{{/* Name of the operator's objects. */}}
{{- define "sandpool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods. Never change these: Deployment selectors are immutable. */}}
{{- define "sandpool.selectorLabels" -}}
app.kubernetes.io/name: sandpool-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "sandpool.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: sandpool
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels on the operator's own objects. */}}
{{- define "sandpool.labels" -}}
{{ include "sandpool.selectorLabels" . }}
app.kubernetes.io/component: operator
{{ include "sandpool.commonLabels" . }}
{{- end -}}

{{/* Cluster-scoped names must be unique across releases in different namespaces. */}}
{{- define "sandpool.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "sandpool.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sandpool.operatorImage" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "sandpool.executorImage" -}}
{{- printf "%s:%s" .Values.executor.image.repository (.Values.executor.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
