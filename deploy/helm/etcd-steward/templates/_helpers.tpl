{{- define "etcd-steward.labels" -}}
app.kubernetes.io/name: etcd-steward
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "etcd-steward.selectorLabels" -}}
app.kubernetes.io/name: etcd-steward
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
