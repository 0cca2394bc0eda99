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
app.kubernetes.io/version: {{ include "sandpool.tag" (dict "tag" .Values.image.tag "default" .Chart.AppVersion) | quote }}
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

{{/*
An image tag as a string, else the default. `--set image.tag=1` makes a number (an integer;
from a values file, a float64 that is whole, which the schema checks), and `1` is a tag: so
numbers are printed as integers (never "1e+06" or "%!s(int64=1)"), and 0 is a tag too.
*/}}
{{- define "sandpool.tag" -}}
{{- $tag := .tag -}}
{{- if kindIs "invalid" $tag -}}{{- $tag = "" -}}{{- end -}}
{{- if kindIs "float64" $tag -}}{{- $tag = int64 $tag -}}{{- end -}}
{{- toString $tag | default .default -}}
{{- end -}}

{{- define "sandpool.operatorImage" -}}
{{- printf "%s:%s" .Values.image.repository (include "sandpool.tag" (dict "tag" .Values.image.tag "default" .Chart.AppVersion)) -}}
{{- end -}}

{{- define "sandpool.executorImage" -}}
{{- printf "%s:%s" .Values.executor.image.repository (include "sandpool.tag" (dict "tag" .Values.executor.image.tag "default" .Chart.AppVersion)) -}}
{{- end -}}

{{/*
Where the executors' and gateways' ServiceMonitors look for pools: the release namespace,
or in cluster-wide mode the watched namespaces (all when none are listed).
*/}}
{{- define "sandpool.monitorNamespaces" -}}
namespaceSelector:
{{- if not .Values.watch.clusterWide }}
  matchNames: [{{ .Release.Namespace | quote }}]
{{- else if .Values.watch.namespaces }}
  matchNames:
    {{- toYaml .Values.watch.namespaces | nindent 4 }}
{{- else }}
  any: true
{{- end }}
{{- end }}
