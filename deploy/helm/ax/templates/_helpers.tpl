{{/* The release's name for AX's objects: <release>-ax, or the release when it says ax. */}}
{{- define "ax.fullname" -}}
{{- if contains "ax" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ax" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ax.labels" -}}
app.kubernetes.io/name: ax
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ax.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* ax.poolName is the Kubernetes name of an executor pool (dict: pool). */}}
{{- define "ax.poolName" -}}
{{- .name | default (regexReplaceAll "[^a-z0-9-]" (lower .pool) "-") | trunc 30 | trimSuffix "-" -}}
{{- end -}}

{{/* ax.streamPrefix is the upper-case prefix of AX's stream names (streams.Topology). */}}
{{- define "ax.streamPrefix" -}}
{{- upper .Values.prefix -}}
{{- end -}}

{{/*
ax.env is the environment of a service (dict: root, role): NATS as the
role's user with its own inbox prefix (streams/natsauth), PostgreSQL but for
the executor, the prefix, the log format.
*/}}
{{- define "ax.env" -}}
{{- $root := .root -}}
- name: NATS_URL
  value: {{ $root.Values.nats.url | quote }}
- name: NATS_USER
  value: {{ .role | quote }}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.nats.existingSecret | default (printf "%s-nats-users" (include "ax.fullname" $root)) }}
      key: {{ .role }}
{{- if ne .role "dispatcher" }}
- name: NATS_INBOX_PREFIX
  value: {{ printf "_INBOX_%s" .role | quote }}
{{- end }}
{{- if ne .role "executor" }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.database.existingSecret | default (printf "%s-database" (include "ax.fullname" $root)) }}
      key: DATABASE_URL
{{- end }}
- name: AX_PREFIX
  value: {{ $root.Values.prefix | quote }}
- name: AX_LOG_FORMAT
  value: {{ $root.Values.logFormat | quote }}
- name: AX_METRICS_ADDR
  value: {{ printf "0.0.0.0:%v" $root.Values.metricsPort | quote }}
{{- end -}}

{{/* ax.probes checks a service by its metrics listener (dict: root, path, port). */}}
{{- define "ax.probes" -}}
startupProbe:
  httpGet: {path: {{ .path }}, port: {{ .port }}}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: {{ .path }}, port: {{ .port }}}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: {{ .path }}, port: {{ .port }}}
  periodSeconds: 5
{{- end -}}

{{/*
ax.deployment is one service's Deployment (dict: root, component, role,
args, values, replicas, pool, gracePeriod, extraPorts, probePath, probePort).
*/}}
{{- define "ax.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ printf "%s-%s" (include "ax.fullname" $root) .component }}
  labels:
    {{- include "ax.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- if .pool }}
    ax.io/pool: {{ .poolLabel | quote }}
    {{- end }}
spec:
  {{- if not .autoscaled }}
  replicas: {{ .replicas }}
  {{- end }}
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ $root.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        {{- include "ax.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $root.Values.metricsPort | quote }}
    spec:
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if .gracePeriod }}
      terminationGracePeriodSeconds: {{ .gracePeriod }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: {{ .role }}
          image: {{ include "ax.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml (concat .args ($v.extraArgs | default list)) | nindent 12 }}
          env:
            {{- include "ax.env" (dict "root" $root "role" .role) | nindent 12 }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metricsPort }}
            {{- with .extraPorts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "ax.probes" (dict "path" (.probePath | default "/metrics") "port" (.probePort | default "metrics")) | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}


{{/*
ax.fnv32a is the FNV-1a hash of a string, as 8 hex digits: the suffix of a
pool consumer's name (streams.PoolConsumerName). Templates have no XOR, so
the low byte is XORed bit by bit.
*/}}
{{- define "ax.fnv32a" -}}
{{- $s := . -}}
{{- $h := 2166136261 -}}
{{- $bits := list 1 2 4 8 16 32 64 128 -}}
{{- range $i := until (len $s) -}}
{{- $b := int (index $s $i) -}}
{{- $lo := mod $h 256 -}}
{{- $x := 0 -}}
{{- range $p := $bits -}}
{{- if ne (mod (div $lo $p) 2) (mod (div $b $p) 2) -}}{{- $x = add $x $p -}}{{- end -}}
{{- end -}}
{{- $h = mod (mul (add (sub $h $lo) $x) 16777619) 4294967296 -}}
{{- end -}}
{{- printf "%08x" (int64 $h) -}}
{{- end -}}

{{/*
ax.poolConsumer is the name of the dispatch consumer of a pool, priority
and handler (dict: pool, priority, handler): streams.PoolConsumerName.
*/}}
{{- define "ax.poolConsumer" -}}
{{- $readable := printf "pool_%s_%s_%s" .pool .priority (replace "." "_" .handler) | trunc 200 -}}
{{- printf "%s_%s" $readable (include "ax.fnv32a" (printf "%s\x00%s\x00%s" .pool .priority .handler)) -}}
{{- end -}}
