#!/usr/bin/env bash
# Writes the kustomize overlay of one Ticketing group (deploy/README.md,
# "Several groups"): a directory NAME/ next to this script that renders
# deploy/base/ as the group NAME, with N members (3 or 5, default 3).
#
# Usage: deploy/groups/new-group.sh [-o PARENT] NAME [3|5]
#   -o PARENT  write PARENT/NAME/ instead of deploy/groups/NAME/
#
# NAME: 1-20 characters, lower-case letters, digits and '-', starting with
# a letter and not ending with '-' (it is part of Kubernetes object names
# and pod DNS names), and not "default" (the group of a node started
# without --group). An existing directory is never overwritten.
#
# The directory holds:
#   kustomization.yaml   deploy/base/ with the names suffixed -NAME
#                        (ticketing-NAME, ticketing-peers-NAME) and the patches
#   statefulset.yaml     the group label, N replicas, --group=NAME, --peers of
#                        the group's N pods, the group's peer Secret and
#                        recovery ConfigMap, anti-affinity within the group
#   peers-service.yaml, client-service.yaml, pdb.yaml
#                        the group label on the object and in its selector
#   networkpolicy.yaml   the group's ports: peer from the group's members and
#                        ticketing-admin: "true" pods, client from
#                        ticketing-client: "true" pods, admin from the group's
#                        members and Prometheus
#   ring-job.yaml        a Job (not part of the kustomization) that gives the
#                        group the ring of the ConfigMap ticketing-ring
#
# deploy/check.sh renders and checks every group directory, and compares a
# directory whose kustomization.yaml still has the "# generated:" line with
# what this script writes for the same arguments.
set -euo pipefail

usage() {
  echo "usage: $0 [-o PARENT] NAME [3|5]" >&2
  exit 64
}

parent=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "-o" ]; then
  [ $# -ge 2 ] || usage
  parent=$2
  shift 2
fi
[ $# -ge 1 ] && [ $# -le 2 ] || usage
name=$1
n=${2:-3}

if ! [[ $name =~ ^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$ ]]; then
  echo "$0: bad group name '$name': 1-20 of a-z, 0-9 and '-', a letter first, no '-' last" >&2
  exit 64
fi
if [ "$name" = default ]; then
  echo "$0: 'default' is the group of nodes started without --group: choose another name" >&2
  exit 64
fi
if [ "$n" != 3 ] && [ "$n" != 5 ]; then
  echo "$0: a group has 3 or 5 members, not '$n'" >&2
  exit 64
fi
[ -d "$parent" ] || {
  echo "$0: no directory $parent" >&2
  exit 1
}
dir=$parent/$name
if [ -e "$dir" ]; then
  echo "$0: $dir exists; remove it first to write it again" >&2
  exit 1
fi

sts=ticketing-$name
peers=""
for ((i = 0; i < n; i++)); do
  peers+="${peers:+,}$sts-$i.\$(PEER_DOMAIN):7401"
done

mkdir "$dir"

cat >"$dir/kustomization.yaml" <<EOF
# generated: new-group.sh $name $n
# (deploy/check.sh compares this directory with the script's output while
# the line above is here; delete that line once you edit these files.)
#
# The Ticketing group "$name": deploy/base/ as $n members started with
# --group=$name, every object named with the suffix -$name and selecting
# the group's pods only (deploy/README.md, "Several groups").
#
#   kubectl apply -k deploy/groups/$name/
#
# Create the Secret $sts-peer-secret first; the client Secret
# (ticketing-client-secret) is shared by all groups. The group serves no
# key until it has a ring: ring-job.yaml, which is not part of this
# kustomization.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../base
nameSuffix: -$name
# The patches name the objects as the base does; the suffix comes after.
patches:
  - path: statefulset.yaml
    target:
      kind: StatefulSet
      name: ticketing
  - path: peers-service.yaml
    target:
      kind: Service
      name: ticketing-peers
  - path: client-service.yaml
    target:
      kind: Service
      name: ticketing
  - path: pdb.yaml
    target:
      kind: PodDisruptionBudget
      name: ticketing
  - path: networkpolicy.yaml
    target:
      kind: NetworkPolicy
      name: ticketing
EOF

cat >"$dir/statefulset.yaml" <<EOF
# Strategic-merge patch: the StatefulSet of the group "$name" ($sts after
# the suffix). What it changes from deploy/base/statefulset.yaml:
# - the label ticketing.example/group: $name on the pods and in the
#   selector, the anti-affinity and the zone spread (one member of this
#   group per node; members of other groups may share it);
# - $n replicas;
# - the first three env entries (patched as a prefix, so that kustomize
#   keeps their order: PEER_DOMAIN uses POD_NAMESPACE), for the headless
#   Service ticketing-peers-$name;
# - envFrom: the recovery ConfigMap of this group only;
# - args, replaced whole (a list of strings): the base's with --peers of
#   this group's $n pods and --group=$name;
# - volumes: the client Secret shared by all groups, this group's peer
#   Secret.
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ticketing
  labels:
    ticketing.example/group: $name
spec:
  replicas: $n
  selector:
    matchLabels:
      ticketing.example/group: $name
  template:
    metadata:
      labels:
        ticketing.example/group: $name
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector:
                matchLabels:
                  app.kubernetes.io/name: ticketing
                  ticketing.example/group: $name
              topologyKey: kubernetes.io/hostname
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: ticketing
              ticketing.example/group: $name
      containers:
        - name: ticketingd
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: PEER_DOMAIN
              value: ticketing-peers-$name.\$(POD_NAMESPACE).svc.cluster.local
          envFrom:
            - configMapRef:
                name: $sts-force-new-domain
                optional: true
          args:
            - --advertise=\$(POD_NAME).\$(PEER_DOMAIN):7400
            - --peers=$peers
            - --group=$name
            - --client-secret-file=/etc/ticketing/client/secret
            - --peer-secret-file=/etc/ticketing/peer/secret
      volumes:
        - name: client-secret
          secret:
            secretName: ticketing-client-secret
            defaultMode: 0440
            items:
              - key: secret
                path: secret
        - name: peer-secret
          secret:
            secretName: $sts-peer-secret
            defaultMode: 0440
            items:
              - key: secret
                path: secret
EOF

for svc in peers client; do
  base=ticketing
  [ "$svc" = peers ] && base=ticketing-peers
  cat >"$dir/$svc-service.yaml" <<EOF
# Strategic-merge patch: the Service $base-$name selects the pods of the
# group "$name" only.
apiVersion: v1
kind: Service
metadata:
  name: $base
  labels:
    ticketing.example/group: $name
spec:
  selector:
    ticketing.example/group: $name
EOF
done

cat >"$dir/pdb.yaml" <<EOF
# Strategic-merge patch: the budget $sts counts the pods of the group
# "$name" only (at most one of them down; other groups have their own).
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ticketing
  labels:
    ticketing.example/group: $name
spec:
  selector:
    matchLabels:
      ticketing.example/group: $name
EOF

cat >"$dir/networkpolicy.yaml" <<EOF
# Strategic-merge patch: the NetworkPolicy $sts selects the pods of the
# group "$name", and its rules (a list the patch replaces whole) admit:
# - peer port (7401): the members of this group, and pods labelled
#   ticketing-admin: "true" (the ring Job, ring-job.yaml); members of other
#   groups never;
# - client port (7400): pods labelled ticketing-client: "true" (clients may
#   use every group);
# - admin port (7402): the members of this group, and Prometheus in the
#   namespace "monitoring".
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: ticketing
  labels:
    ticketing.example/group: $name
spec:
  podSelector:
    matchLabels:
      ticketing.example/group: $name
  ingress:
    - from:
        - podSelector:
            matchLabels:
              app.kubernetes.io/name: ticketing
              ticketing.example/group: $name
      ports:
        - port: peer
          protocol: TCP
        - port: admin
          protocol: TCP
    - from:
        - podSelector:
            matchLabels:
              ticketing-admin: "true"
      ports:
        - port: peer
          protocol: TCP
    - from:
        - podSelector:
            matchLabels:
              ticketing-client: "true"
      ports:
        - port: client
          protocol: TCP
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: monitoring
          podSelector:
            matchLabels:
              app.kubernetes.io/name: prometheus
      ports:
        - port: admin
          protocol: TCP
EOF

cat >"$dir/ring-job.yaml" <<EOF
# Gives the group "$name" the ring in the ConfigMap ticketing-ring (key
# ring.txt): ticketctl ring apply over the leader's peer port, with this
# group's peer secret. Not part of the kustomization; run it whenever the
# ring changes (deploy/README.md, "Several groups"):
#
#   kubectl delete job $sts-ring --ignore-not-found
#   kubectl apply -f deploy/groups/$name/ring-job.yaml
#   kubectl wait --for=condition=complete job/$sts-ring --timeout=5m
#   kubectl logs job/$sts-ring
#
# Its pod is labelled ticketing-admin: "true", which the group's
# NetworkPolicy admits on the peer port, and nothing that any group's
# selectors pick. Giving the same ring again is answered as committed, so
# a retry is harmless; a refusal (84) or a usage error (64) fails the Job
# at once. It runs under the pods' seccomp profile (installed on the nodes).
apiVersion: batch/v1
kind: Job
metadata:
  name: $sts-ring
  labels:
    ticketing-admin: "true"
spec:
  backoffLimit: 3
  activeDeadlineSeconds: 300
  ttlSecondsAfterFinished: 86400
  podFailurePolicy:
    rules:
      - action: FailJob
        onExitCodes:
          containerName: ticketctl
          operator: In
          values: [64, 84]
  template:
    metadata:
      labels:
        ticketing-admin: "true"
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
        seccompProfile:
          type: Localhost
          localhostProfile: ticketing/ticketingd.json
      containers:
        - name: ticketctl
          # The image of deploy/base/statefulset.yaml (check.sh checks it).
          image: ticketing:dev
          imagePullPolicy: IfNotPresent
          command: ["ticketctl"]
          env:
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: PEER_DOMAIN
              value: ticketing-peers-$name.\$(POD_NAMESPACE).svc.cluster.local
          args:
            - ring
            - apply
            - /etc/ticketing/ring/ring.txt
            - --group
            - $name
            - --peers
            - $peers
            - --peer-secret-file
            - /etc/ticketing/peer/secret
            - --timeout
            - 30s
          resources:
            requests:
              cpu: 100m
              memory: 64Mi
            limits:
              memory: 256Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: ring
              mountPath: /etc/ticketing/ring
              readOnly: true
            - name: peer-secret
              mountPath: /etc/ticketing/peer
              readOnly: true
      volumes:
        - name: ring
          configMap:
            name: ticketing-ring
            items:
              - key: ring.txt
                path: ring.txt
        - name: peer-secret
          secret:
            secretName: $sts-peer-secret
            defaultMode: 0440
            items:
              - key: secret
                path: secret
EOF

echo "wrote $dir/ (group $name, $n members): kustomization.yaml, statefulset.yaml,"
echo "  peers-service.yaml, client-service.yaml, pdb.yaml, networkpolicy.yaml, ring-job.yaml"
