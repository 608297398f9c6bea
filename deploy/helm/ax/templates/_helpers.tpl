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

{{/*
ax.poolValues is the settings of an executor pool (dict: root, pool) as
YAML: the pool's over executorDefaults, key by key (a merge would not let
false or 0 override), with replicas and users, the number of its replicas
that have a NATS user: autoscaling.maxReplicas when autoscaled, else
replicas.
*/}}
{{- define "ax.poolValues" -}}
{{- $p := .pool -}}
{{- $v := deepCopy .root.Values.executorDefaults -}}
{{- range $k, $val := omit $p "pool" "name" "replicas" "autoscaling" }}{{ $_ := set $v $k $val }}{{ end -}}
{{- range $k, $val := $p.autoscaling | default dict }}{{ $_ := set $v.autoscaling $k $val }}{{ end -}}
{{- $_ := set $v "replicas" (int ($p.replicas | default 1)) -}}
{{- $_ := set $v "users" (int (ternary $v.autoscaling.maxReplicas $v.replicas $v.autoscaling.enabled)) -}}
{{- toYaml $v -}}
{{- end -}}

{{/* ax.poolStatefulSet is the name of a pool's StatefulSet (dict: root, pool); its pods are <name>-<ordinal>. */}}
{{- define "ax.poolStatefulSet" -}}
{{- printf "%s-executor-%s" (include "ax.fullname" .root) (include "ax.poolName" .pool) -}}
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
{{- if eq .role "executor" }}
{{- /* A worker of its own: the pod's name is its worker id and names its NATS user (natsauth.WorkerUserName). */}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: AX_WORKER_ID
  value: "$(POD_NAME)"
- name: NATS_USER
  value: "executor-$(POD_NAME)"
- name: NATS_PASSWORD_FILE
  value: /run/ax/nats/password
- name: NATS_INBOX_PREFIX
  value: "_INBOX_executor-$(POD_NAME)"
{{- else }}
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
{{- end }}
{{- if ne .role "executor" }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.database.existingSecret | default (printf "%s-database" (include "ax.fullname" $root)) }}
      key: DATABASE_URL
{{- end }}
{{- if $root.Values.nats.tls.enabled }}
- name: NATS_CA
  value: /etc/ax/nats-tls/ca.crt
{{- if $root.Values.nats.tls.clientCert }}
- name: NATS_CERT
  value: /etc/ax/nats-tls/tls.crt
- name: NATS_KEY
  value: /etc/ax/nats-tls/tls.key
{{- end }}
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
args, values, replicas, pool, gracePeriod, extraPorts, probePath, probePort),
or with statefulSet an executor pool's StatefulSet: its pods' names are
their worker ids, and each pod mounts its own NATS password only (an init
container, ax pod-secret, copies it out of the pool's Secret).
*/}}
{{- define "ax.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- $name := printf "%s-%s" (include "ax.fullname" $root) .component -}}
{{- $tls := $root.Values.nats.tls.enabled -}}
apiVersion: apps/v1
kind: {{ ternary "StatefulSet" "Deployment" (.statefulSet | default false) }}
metadata:
  name: {{ $name }}
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
  {{- if .statefulSet }}
  serviceName: {{ $name }}
  # The replicas share no state: start and stop them together.
  podManagementPolicy: Parallel
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
        {{- if or .statefulSet $tls }}
        # The image's user (distroless nonroot); the group reads the pool's
        # Secret and the NATS TLS Secret.
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        {{- end }}
      {{- if .statefulSet }}
      # The executor runs handler code: no Kubernetes credential for it.
      automountServiceAccountToken: false
      initContainers:
        - name: nats-password
          image: {{ include "ax.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [pod-secret, --dir, /secrets/pool, --out, /run/ax/nats/password]
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef: {fieldPath: metadata.name}
          volumeMounts:
            - {name: pool-passwords, mountPath: /secrets/pool, readOnly: true}
            - {name: nats-password, mountPath: /run/ax/nats}
          resources:
            requests: {cpu: 10m, memory: 16Mi}
            limits: {memory: 32Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
      {{- end }}
      {{- if or .statefulSet $tls }}
      volumes:
        {{- if .statefulSet }}
        # Every replica's password: mounted by the init container alone.
        - name: pool-passwords
          secret:
            secretName: {{ printf "%s-nats" $name }}
            defaultMode: 0440
        # This pod's password, written by the init container.
        - name: nats-password
          emptyDir: {medium: Memory, sizeLimit: 1Mi}
        {{- end }}
        {{- if $tls }}
        # The CA (and client certificate) of the connections to NATS.
        - name: nats-tls
          secret:
            secretName: {{ required "nats.tls.existingSecret is required with nats.tls.enabled: a Secret with ca.crt (and tls.crt, tls.key with clientCert)" $root.Values.nats.tls.existingSecret }}
            defaultMode: 0440
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .role }}
          image: {{ include "ax.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml (concat .args ($v.extraArgs | default list)) | nindent 12 }}
          env:
            {{- include "ax.env" (dict "root" $root "role" .role) | nindent 12 }}
          {{- if or .statefulSet $tls }}
          volumeMounts:
            {{- if .statefulSet }}
            - {name: nats-password, mountPath: /run/ax/nats, readOnly: true}
            {{- end }}
            {{- if $tls }}
            - {name: nats-tls, mountPath: /etc/ax/nats-tls, readOnly: true}
            {{- end }}
          {{- end }}
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
