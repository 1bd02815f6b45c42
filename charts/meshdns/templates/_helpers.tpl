{{/*
Names. With the release named meshdns every object is named meshdns, as in
deploy/kubernetes; another release name R gives R-meshdns unless R already
contains meshdns.
*/}}
{{- define "meshdns.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meshdns.fullname" -}}
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

{{/* The DNS Service's name: the Corefile's publish names it too. */}}
{{- define "meshdns.serviceName" -}}
{{- default (include "meshdns.fullname" .) .Values.service.name -}}
{{- end -}}

{{- define "meshdns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meshdns.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The selector: the pods' name label only (as deploy/kubernetes). */}}
{{- define "meshdns.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshdns.name" . }}
{{- end -}}

{{/* Every object's labels. Helm adds app.kubernetes.io/managed-by itself. */}}
{{- define "meshdns.labels" -}}
{{ include "meshdns.selectorLabels" . }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Every object's annotations (none by default), as a metadata key. */}}
{{- define "meshdns.annotations" -}}
{{- with .Values.customAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "meshdns.k8sApp" -}}
{{- default "kube-dns" .Values.k8sAppLabelOverride -}}
{{- end -}}

{{/* The image: repository:tag (tag defaults to v + appVersion) or @digest. */}}
{{- define "meshdns.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
meshdns.corefile renders a Corefile of a list of server blocks.
Context: dict "servers" LIST "extraConfig" STRING "root" $.
Each server: zones ([{zone, scheme}], default "."), port, plugins (name,
parameters, configBlock; parameters and configBlock through tpl).
*/}}
{{- define "meshdns.corefile" -}}
{{- $root := .root -}}
{{- range $i, $s := .servers -}}
{{- $keys := list -}}
{{- range $s.zones -}}
{{- $key := printf "%s%s" (default "" .scheme) (default "." .zone) -}}
{{- if $s.port }}{{ $key = printf "%s:%v" $key $s.port }}{{ end -}}
{{- $keys = append $keys $key -}}
{{- else -}}
{{- $keys = append $keys (ternary (printf ".:%v" $s.port) "." (not (empty $s.port))) -}}
{{- end -}}
{{ join " " $keys }} {
{{- range $s.plugins }}
    {{ .name }}{{ with .parameters }} {{ tpl (toString .) $root }}{{ end }}{{ with .configBlock }} {
{{ tpl . $root | indent 8 }}
    }{{ end }}
{{- end }}
}
{{ end -}}
{{- with .extraConfig }}
{{ tpl . $root }}
{{ end -}}
{{- end -}}

{{/*
meshdns.pluginAddr: the address (first parameter, through tpl) of the first
plugin named NAME in servers, "" when there is none or it has no address.
Context: list SERVERS NAME ROOT.
*/}}
{{- define "meshdns.pluginAddr" -}}
{{- $name := index . 1 -}}{{- $root := index . 2 -}}
{{- $found := "" -}}{{- $done := false -}}
{{- range (index . 0) -}}
{{- range .plugins -}}
{{- if and (eq .name $name) (not $done) -}}
{{- $done = true -}}
{{- $found = first (splitList " " (tpl (toString (default "" .parameters)) $root)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{/* meshdns.addrPort: the port of an address (":8080", "0.0.0.0:9153", "[::]:9153"), or DEFAULT. Context: list ADDR DEFAULT. */}}
{{- define "meshdns.addrPort" -}}
{{- default (index . 1) (regexFind "[0-9]+$" (regexFind ":[0-9]+$" (index . 0))) -}}
{{- end -}}

{{/* meshdns.addrHost: the host of an address, "" for none (":8080"). Context: ADDR. */}}
{{- define "meshdns.addrHost" -}}
{{- if contains ":" . -}}
{{- regexReplaceAll ":[0-9]+$" . "" | trimPrefix "[" | trimSuffix "]" -}}
{{- end -}}
{{- end -}}

{{/*
meshdns.probe renders a probe's httpGet on the address of the plugin that
serves it (ready or health), then the probe's own keys.
Context: dict "servers" LIST "plugin" NAME "path" PATH "port" DEFAULT "probe" VALUES "root" $.
*/}}
{{- define "meshdns.probe" -}}
{{- $addr := include "meshdns.pluginAddr" (list .servers .plugin .root) -}}
{{- $host := include "meshdns.addrHost" $addr -}}
httpGet: {{ if $host }}{host: {{ $host }}, {{ else }}{{ "{" }}{{ end }}path: {{ .path }}, port: {{ include "meshdns.addrPort" (list $addr .port) }}, scheme: HTTP}
{{- with omit .probe "enabled" }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
meshdns.ports: the ports the Corefile serves, as a JSON list of {name, port,
protocol}: dns (UDP) and dns-tcp (TCP) for each server's port (dns-PORT and
dns-tcp-PORT past the first), metrics for prometheus's address, replication
for endpointsvc's "replicate ADDR". Context: list SERVERS ROOT.
*/}}
{{- define "meshdns.ports" -}}
{{- $servers := index . 0 -}}{{- $root := index . 1 -}}
{{- $ports := list -}}
{{- $seen := dict -}}
{{- range $servers -}}
{{- $p := toString (default 53 .port) -}}
{{- if not (hasKey $seen $p) -}}
{{- $suffix := ternary "" (printf "-%s" $p) (empty $seen) -}}
{{- $_ := set $seen $p true -}}
{{- $ports = append $ports (dict "name" (printf "dns%s" $suffix) "port" (atoi $p) "protocol" "UDP") -}}
{{- $ports = append $ports (dict "name" (printf "dns-tcp%s" $suffix) "port" (atoi $p) "protocol" "TCP") -}}
{{- end -}}
{{- end -}}
{{- $prom := include "meshdns.pluginAddr" (list $servers "prometheus" $root) -}}
{{- if or $prom (include "meshdns.hasPlugin" (list $servers "prometheus")) -}}
{{- $ports = append $ports (dict "name" "metrics" "port" (atoi (include "meshdns.addrPort" (list $prom "9153"))) "protocol" "TCP") -}}
{{- end -}}
{{- $repl := "" -}}
{{- range $servers -}}
{{- range .plugins -}}
{{- if and (eq .name "endpointsvc") .configBlock (not $repl) -}}
{{- $line := regexFind "(?m)^\\s*replicate\\s+\\S+" (tpl .configBlock $root) -}}
{{- if $line }}{{ $repl = regexFind "[0-9]+$" $line }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $repl -}}
{{- $ports = append $ports (dict "name" "replication" "port" (atoi .) "protocol" "TCP") -}}
{{- end -}}
{{- toJson $ports -}}
{{- end -}}

{{/* meshdns.hasPlugin: "yes" when a plugin named NAME is in servers. Context: list SERVERS NAME. */}}
{{- define "meshdns.hasPlugin" -}}
{{- $name := index . 1 -}}
{{- range (index . 0) -}}{{- range .plugins -}}{{- if eq .name $name -}}yes{{- end -}}{{- end -}}{{- end -}}
{{- end -}}

{{/* The node-local objects' name and name label: the cluster's + -node-local. */}}
{{- define "meshdns.nodeLocal.fullname" -}}
{{- $f := include "meshdns.fullname" . -}}
{{- if hasSuffix "-node-local" $f }}{{ $f }}{{ else }}{{ printf "%s-node-local" $f | trunc 63 | trimSuffix "-" }}{{ end -}}
{{- end -}}

{{- define "meshdns.nodeLocal.name" -}}
{{- printf "%s-node-local" (include "meshdns.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meshdns.nodeLocal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshdns.nodeLocal.name" . }}
{{- end -}}

{{- define "meshdns.nodeLocal.labels" -}}
{{ include "meshdns.nodeLocal.selectorLabels" . }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The node-local's upstream Service (nodeLocal.upstream): its name, the
cluster release's fullname + -upstream (a node-local release named meshdns
or meshdns-node-local names meshdns-upstream), and the address the
Corefile forwards to and follows the stream from: the pinned ClusterIP, the
kubelet's Service link variable {$<NAME>_SERVICE_HOST}, or clusterDNS with
the Service off.
*/}}
{{- define "meshdns.nodeLocal.upstreamName" -}}
{{- default (printf "%s-upstream" (include "meshdns.fullname" . | trimSuffix "-node-local") | trunc 63 | trimSuffix "-") .Values.nodeLocal.upstream.name -}}
{{- end -}}

{{- define "meshdns.nodeLocal.upstreamHost" -}}
{{- $u := .Values.nodeLocal.upstream -}}
{{- if not $u.enabled -}}
{{- .Values.nodeLocal.clusterDNS -}}
{{- else if $u.clusterIP -}}
{{- $u.clusterIP -}}
{{- else -}}
{{- printf "{$%s_SERVICE_HOST}" (include "meshdns.nodeLocal.upstreamName" . | upper | replace "-" "_") -}}
{{- end -}}
{{- end -}}

{{/*
The replication stream's Secret (key token), both releases': the value, or
the cluster release's own, <cluster fullname>-replication (a node-local
release named meshdns or meshdns-node-local finds meshdns-replication).
*/}}
{{- define "meshdns.replicationSecret" -}}
{{- if .Values.replication.secretName -}}
{{- .Values.replication.secretName -}}
{{- else -}}
{{- printf "%s-replication" (include "meshdns.fullname" . | trimSuffix "-node-local") | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Where both sides mount the token and the TLS files. */}}
{{- define "meshdns.replicationTokenFile" -}}/var/run/secrets/meshdns-replication/token{{- end -}}
{{- define "meshdns.replicationTLSDir" -}}/var/run/secrets/meshdns-replication-tls{{- end -}}

{{/* The volume mounts of the replication stream's files. Context: $. */}}
{{- define "meshdns.replicationMounts" -}}
- {name: replication, mountPath: /var/run/secrets/meshdns-replication, readOnly: true}
{{- if .Values.replication.tls.secretName }}
- {name: replication-tls, mountPath: {{ include "meshdns.replicationTLSDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* Their volumes; tls: the keys this side reads. Context: dict "root" $ "keys" LIST. */}}
{{- define "meshdns.replicationVolumes" -}}
{{- $root := .root -}}
# the replication stream's token (replication.secretName): the pod starts
# once it has one, and reads it at each connection
- name: replication
  secret:
    secretName: {{ include "meshdns.replicationSecret" $root }}
    items:
    - {key: token, path: token}
{{- with $root.Values.replication.tls.secretName }}
- name: replication-tls
  secret:
    secretName: {{ . }}
    items:
    {{- range $.keys }}
    - {key: {{ . }}, path: {{ . }}}
    {{- end }}
{{- end }}
{{- end -}}

{{/*
Sizing from the cluster's size (clusterSize.endpoints; docs/node-local.md,
"Sizing"). meshdns.resources returns the resources map with the memory
limit raised to what the table needs: base + endpoints x tenthsKiB/10 KiB,
in MiB; a limit given in Mi below that is raised, one in other units is
kept as given. Call with (dict "res" MAP "root" $ "base" MiB "tenthsKiB" N).
*/}}
{{- define "meshdns.memoryFloor" -}}
{{- add .base (div (mul (int .root.Values.clusterSize.endpoints) .tenthsKiB) 10240) -}}
{{- end }}
{{- define "meshdns.resources" -}}
{{- $res := deepCopy (.res | default dict) -}}
{{- $min := include "meshdns.memoryFloor" . | int -}}
{{- $lim := get $res "limits" | default dict -}}
{{- $cur := toString (get $lim "memory" | default "") -}}
{{- if or (eq $cur "") (and (hasSuffix "Mi" $cur) (lt (trimSuffix "Mi" $cur | int) $min)) -}}
{{- $_ := set $lim "memory" (printf "%dMi" $min) -}}
{{- $_ := set $res "limits" $lim -}}
{{- end -}}
{{- toYaml $res -}}
{{- end }}

{{/*
meshdns.stateSize is the state emptyDir's sizeLimit: room for three
snapshots' worth, ~100 bytes an endpoint each (the snapshot, the new one
written beside it at a compaction, and the change log, which grows to
one snapshot's size at most), at least 64Mi; a sizeLimit given in Mi
below that is raised.
*/}}
{{- define "meshdns.stateSize" -}}
{{- $min := max 64 (div (add (mul (int .Values.clusterSize.endpoints) 300) 1048575) 1048576) -}}
{{- $cur := toString (.Values.stateVolume.sizeLimit | default "") -}}
{{- if or (eq $cur "") (and (hasSuffix "Mi" $cur) (lt (trimSuffix "Mi" $cur | int) (int $min))) -}}
{{- printf "%dMi" (int $min) -}}
{{- else -}}
{{- $cur -}}
{{- end -}}
{{- end }}
