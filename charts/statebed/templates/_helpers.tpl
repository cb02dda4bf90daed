{{/* Helpers shared by the umbrella chart and its subcharts (named templates are global in Helm). */}}

{{/* An image reference: repository[:tag][@digest]. A digest pins the image; the tag stays for readers. */}}
{{- define "statebed.imageRef" -}}
{{- $ref := .repository -}}
{{- if .tag }}{{ $ref = printf "%s:%s" $ref .tag }}{{ end -}}
{{- if .digest }}{{ $ref = printf "%s@%s" $ref .digest }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* statebed's own image (driver, executors, chaos controller, ingest, Locust): wired by skaffold. */}}
{{- define "statebed.image" -}}
{{- include "statebed.imageRef" .Values.global.image -}}
{{- end -}}

{{- define "statebed.labels" -}}
app.kubernetes.io/name: statebed
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "statebed.minio" -}}{{ .Release.Name }}-minio{{- end -}}
{{- define "statebed.toxiproxy" -}}{{ .Release.Name }}-toxiproxy{{- end -}}
{{- define "statebed.s3Secret" -}}{{ .Release.Name }}-s3{{- end -}}
{{- define "statebed.sparkSA" -}}{{ .Release.Name }}-spark{{- end -}}
{{- define "statebed.sparkToken" -}}{{ .Release.Name }}-spark-token{{- end -}}
{{- define "statebed.sparkConf" -}}{{ .Release.Name }}-spark-conf{{- end -}}
{{- define "statebed.ingest" -}}{{ .Release.Name }}-ingest{{- end -}}

{{/* MinIO itself (bucket Job, verifiers reading directly) and the endpoint the store uses: through Toxiproxy. */}}
{{- define "statebed.s3Direct" -}}http://{{ include "statebed.minio" . }}:9000{{- end -}}
{{- define "statebed.s3Endpoint" -}}http://{{ include "statebed.toxiproxy" . }}:{{ .Values.global.s3.proxyPort }}{{- end -}}
{{- define "statebed.toxiproxyApi" -}}http://{{ include "statebed.toxiproxy" . }}:8474{{- end -}}

{{/* The environment every statebed process gets: S3 through the proxy, credentials from the Secret. */}}
{{- define "statebed.s3Env" -}}
- name: STATEBED_S3_ENDPOINT
  value: {{ include "statebed.s3Endpoint" . | quote }}
- name: STATEBED_S3_DIRECT
  value: {{ include "statebed.s3Direct" . | quote }}
- name: AWS_REGION
  value: {{ .Values.global.s3.region | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ include "statebed.s3Secret" . }}, key: accessKey}}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ include "statebed.s3Secret" . }}, key: secretKey}}
{{- end -}}

{{/* The pod's own IP as Spark's address (executors connect back to it; attempt records name it as host). */}}
{{- define "statebed.podIpEnv" -}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: SPARK_LOCAL_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: SPARK_LOCAL_HOSTNAME
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- end -}}

{{/* The runs volume: run directories shared by driver, executors and the chaos controller (same path everywhere). */}}
{{- define "statebed.runsVolume" -}}
- name: runs
{{- if .Values.global.runs.claimName }}
  persistentVolumeClaim: {claimName: {{ .Values.global.runs.claimName }}}
{{- else }}
  hostPath: {path: {{ .Values.global.runs.hostPath }}, type: DirectoryOrCreate}
{{- end }}
{{- end -}}

{{/* A hostPath directory is created root-owned: hand it to uid 185 before the non-root container starts. */}}
{{- define "statebed.runsInit" -}}
- name: runs-owner
  image: {{ include "statebed.image" . | quote }}
  imagePullPolicy: {{ .Values.global.image.pullPolicy }}
  command: ["chown", "185:185", {{ .Values.global.runs.mountPath | quote }}]
  securityContext: {runAsUser: 0, runAsNonRoot: false, allowPrivilegeEscalation: false, capabilities: {drop: ["ALL"], add: ["CHOWN"]}}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {cpu: 100m, memory: 64Mi}
  volumeMounts:
    - {name: runs, mountPath: {{ .Values.global.runs.mountPath }}}
{{- end -}}

{{- define "statebed.podSecurity" -}}
runAsUser: 185
runAsGroup: 185
fsGroup: 185
runAsNonRoot: true
{{- end -}}

{{- define "statebed.containerSecurity" -}}
allowPrivilegeEscalation: false
capabilities: {drop: ["ALL"]}
{{- end -}}
