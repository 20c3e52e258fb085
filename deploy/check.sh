#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/ without a cluster:
#  - every *.yaml under deploy/ parses (PyYAML) and every object has
#    apiVersion, kind and metadata.name;
#  - deploy/ (which includes base/) and every overlay in deploy/overlays/
#    render: the script applies their kustomization.yaml itself (kubectl may
#    be absent), as kustomize does for what they use: resources,
#    replicas, and strategic-merge patches (maps merged, containers merged
#    by name, lists of strings replaced). Anything else (another
#    kustomization field, a patch that merges another list of objects,
#    whose order kustomize may change) fails the check rather than being
#    guessed at;
#  - on each rendering: every ticketingd flag used, as an argument
#    (--flag[=v]) or an environment variable (TICKETING_FLAG), exists in
#    `ticketingd --help`; TICKETING_FORCE_NEW_DOMAIN is never in the pod
#    template; the StatefulSet's serviceName is a headless Service with
#    publishNotReadyAddresses; replicas is 3 or 5 and --peers lists exactly
#    the pods' stable names; pods start in parallel; updates roll
#    (RollingUpdate, no partition); a startupProbe (generous) and a lenient
#    livenessProbe GET /healthz and the readinessProbe GETs /readyz on the
#    admin port; a preStop hook exists, can run in the image, and
#    terminationGracePeriodSeconds covers it plus the 3 s leadership
#    handover; envFrom ConfigMaps are optional; the secret files are
#    mounted from Secrets; the PodDisruptionBudget has maxUnavailable: 1
#    and selects the pods;
#  - the base has 3 replicas and overlays/five-members has 5, with 5
#    addresses in --peers;
#  - the recovery command of deploy/README.md (kubectl create configmap)
#    names the ConfigMap the pods read and a real ticketingd flag;
#  - security: Pod Security "restricted" (runAsNonRoot, no privilege
#    escalation, capabilities drop ALL, read-only root filesystem, no host
#    namespaces) and a Localhost seccomp profile, ticketing/<file>, whose
#    file is in deploy/seccomp/; never Unconfined;
#  - --max-keys (TICKETING_MAX_KEYS) times the measured bytes per key of the
#    StatefulSet's "# sizing:" line is at most 60% of the memory limit;
#  - the NetworkPolicy selects the pods and opens the peer port to the
#    members only, the client port to ticketing-client: "true" pods only,
#    the admin port to the members and to Prometheus in the namespace
#    monitoring only;
#  - monitoring/ renders a ServiceMonitor and a PrometheusRule, and the base
#    needs neither; the ServiceMonitor scrapes /metrics on the admin port of
#    the headless Service only; prometheusrule.yaml is the output of
#    prometheusrule.py and holds the groups of alerts.rules.yml; every
#    required alert is unit-tested firing and not firing;
#  - `promtool check rules` accepts alerts.rules.yml and `promtool test
#    rules` passes alerts.test.yml; grafana-dashboard.json is valid JSON;
#    every metric name that the rules, their tests and the dashboard use is
#    one that ticketingd exposes (the list below), every function a PromQL
#    function, and the dashboard shows the metrics it must;
#  - seccomp/ticketingd.json denies by default and allows io_uring and every
#    call of seccomp/observed.txt; seccomp/exercise.sh --confined runs a
#    3-member cluster, ticketctl, load, a member replacement and a SIGTERM
#    shutdown under it, all of which must succeed;
#  - `kubectl kustomize` (on PATH, or named by $KUBECTL) renders deploy/,
#    each overlay and monitoring/ to the same objects as the script's own
#    rendering.
#
# Usage: deploy/check.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/ticketingd)
#        KUBECTL=/path/to/kubectl PROMTOOL=/path/to/promtool deploy/check.sh BUILD_DIR
# Needs: python3 with PyYAML, promtool (Debian package prometheus),
# python3-seccomp, curl. Every external step runs under `timeout`.
# Exit: 0 pass, 1 fail (a missing tool above fails too), 77 skip: no
# kubectl at all (everything else is checked first and must pass).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build}
bin=$build/ticketingd
fail() {
  echo "deploy/check.sh: FAIL: $*"
  exit 1
}
[ -x "$bin" ] || fail "no ticketingd at $bin (build it first)"

py=""
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' 2>/dev/null; then
    py=$p
    break
  fi
done
[ -n "$py" ] || fail "no python3 with PyYAML (apt-get install python3-yaml)"
promtool=${PROMTOOL:-$(command -v promtool || true)}
[ -n "$promtool" ] || fail "no promtool (apt-get install prometheus)"
/usr/bin/python3 -c 'import seccomp' 2>/dev/null ||
  fail "no python3-seccomp for /usr/bin/python3 (apt-get install python3-seccomp)"

help=$("$bin" --help)

# kubectl's renderings, for the comparison below. A kubectl named by
# $KUBECTL must work; without any, the rest is checked and the script
# exits 77 at the end.
kubectl=${KUBECTL:-$(command -v kubectl || true)}
if [ -n "${KUBECTL:-}" ] && [ ! -x "$KUBECTL" ]; then
  fail "KUBECTL=$KUBECTL is not an executable"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
kdir=""
if [ -n "$kubectl" ]; then
  kdir=$work/kubectl
  mkdir "$kdir"
  for d in "$here" "$here"/overlays/*/ "$here"/monitoring/; do
    [ -f "$d/kustomization.yaml" ] || continue
    d=${d%/}
    name=${d#"$here"}
    name=deploy${name:-}
    if ! timeout 60 "$kubectl" kustomize "$d" >"$kdir/$(echo "$name" | tr / _).yaml"; then
      fail "kubectl kustomize $name"
    fi
  done
fi

# The alert rules: syntax, and their unit tests (alerts.test.yml).
mon=$here/monitoring
timeout 60 "$promtool" check rules "$mon/alerts.rules.yml" >"$work/promtool.out" 2>&1 ||
  fail "promtool check rules monitoring/alerts.rules.yml: $(cat "$work/promtool.out")"
(cd "$mon" && timeout 60 "$promtool" test rules alerts.test.yml) >"$work/promtool.out" 2>&1 ||
  fail "promtool test rules monitoring/alerts.test.yml: $(cat "$work/promtool.out")"
echo "deploy/check.sh: promtool: the rules load and every alert test passes"
"$py" -m json.tool "$mon/grafana-dashboard.json" >/dev/null ||
  fail "monitoring/grafana-dashboard.json is not valid JSON"

# The seccomp profile: a cluster, ticketctl and the preStop command, all
# confined by it, must work from start to shutdown. The profile is for the
# shipped (Release) binaries: a sanitizer build's runtime needs calls the
# image never makes (LeakSanitizer stops the threads with ptrace at exit),
# so there the exercise is left to the Release run.
if grep -qE '^TK_SANITIZE:STRING=.+' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "deploy/check.sh: seccomp exercise left to the Release build (this one has sanitizers)"
else
  timeout 100 bash "$here/seccomp/exercise.sh" --confined "$build" >"$work/seccomp.out" 2>&1 ||
    fail "seccomp/exercise.sh --confined: $(tail -n 8 "$work/seccomp.out")"
  cat "$work/seccomp.out"
fi

"$py" - "$here" "$help" "$kdir" <<'PY'
import copy, glob, json, os, re, sys
import yaml

deploy, help_text, kdir = sys.argv[1], sys.argv[2], sys.argv[3]
flags = set(re.findall(r"^\s+--([a-z][a-z0-9-]*)\s", help_text, re.M))
errors, checks = [], 0

def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        errors.append(msg)
    return bool(cond)

def rel(path):
    return os.path.relpath(path, os.path.dirname(deploy))

check(len(flags) >= 20, "could not read the flags from ticketingd --help")

# --- every YAML file parses ---------------------------------------------------
for path in sorted(glob.glob(os.path.join(deploy, "**", "*.yaml"), recursive=True)):
    try:
        with open(path) as f:
            objs = [o for o in yaml.safe_load_all(f) if o is not None]
    except yaml.YAMLError as e:
        errors.append(f"{rel(path)}: does not parse: {e}")
        continue
    check(objs, f"{rel(path)}: no YAML documents")
    for o in objs:
        ok = isinstance(o, dict) and "apiVersion" in o and "kind" in o
        check(ok, f"{rel(path)}: a document without apiVersion/kind")
        if ok and o["kind"] != "Kustomization":
            check((o.get("metadata") or {}).get("name"),
                  f"{rel(path)}: {o['kind']} without metadata.name")

# --- a kustomize subset --------------------------------------------------------
class Unsupported(Exception):
    pass

# Strategic-merge keys of the lists of objects a patch may merge. Only
# containers: kustomize may reorder a merged list (it moved a patched env
# entry to the front, which breaks $(VAR) references), and a container list
# of one cannot be reordered.
MERGE_KEYS = {"containers": "name"}

def smp(dst, src, where):
    for k, v in src.items():
        if k.startswith("$"):
            raise Unsupported(f"{where}.{k}: patch directives are not supported here")
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            smp(dst[k], v, f"{where}.{k}")
        elif isinstance(v, list) and any(isinstance(e, dict) for e in v):
            key = MERGE_KEYS.get(k)
            if key is None:
                raise Unsupported(f"{where}.{k}: check.sh does not merge this list")
            cur = dst.setdefault(k, [])
            for e in v:
                m = next((c for c in cur if c.get(key) == e.get(key)), None)
                if m is None:
                    cur.append(copy.deepcopy(e))
                else:
                    smp(m, e, f"{where}.{k}[{e.get(key)}]")
        else:
            dst[k] = copy.deepcopy(v)

def render(d, depth=0):
    if depth > 8:
        raise Unsupported(f"{rel(d)}: resources nest too deep")
    kpath = os.path.join(d, "kustomization.yaml")
    with open(kpath) as f:
        k = yaml.safe_load(f) or {}
    unknown = set(k) - {"apiVersion", "kind", "resources", "replicas", "patches"}
    if unknown:
        raise Unsupported(f"{rel(kpath)}: fields check.sh cannot render: {sorted(unknown)}")
    objs = []
    for r in k.get("resources") or []:
        p = os.path.normpath(os.path.join(d, r))
        if os.path.isdir(p):
            objs += render(p, depth + 1)
        elif os.path.isfile(p):
            with open(p) as f:
                objs += [o for o in yaml.safe_load_all(f) if o is not None]
        else:
            raise Unsupported(f"{rel(kpath)}: resource {r} does not exist")
    for pt in k.get("patches") or []:
        if set(pt) - {"path", "target"} or set(pt.get("target") or {}) - {"kind", "name"}:
            raise Unsupported(f"{rel(kpath)}: only patches with path and target kind/name")
        with open(os.path.join(d, pt["path"])) as f:
            docs = [o for o in yaml.safe_load_all(f) if o is not None]
        if len(docs) != 1:
            raise Unsupported(f"{rel(kpath)}: patch {pt['path']} must hold one document")
        patch = docs[0]
        tgt = pt.get("target") or {"kind": patch.get("kind"),
                                   "name": (patch.get("metadata") or {}).get("name")}
        hits = [o for o in objs if o.get("kind") == tgt.get("kind")
                and (o.get("metadata") or {}).get("name") == tgt.get("name")]
        if len(hits) != 1:
            raise Unsupported(f"{rel(kpath)}: patch {pt['path']} matches {len(hits)} objects")
        smp(hits[0], {x: y for x, y in patch.items() if x not in ("apiVersion", "kind")},
            pt["path"])
    for rp in k.get("replicas") or []:
        hits = [o for o in objs if o.get("kind") in ("Deployment", "StatefulSet", "ReplicaSet")
                and (o.get("metadata") or {}).get("name") == rp.get("name")]
        if len(hits) != 1 or not isinstance(rp.get("count"), int):
            raise Unsupported(f"{rel(kpath)}: replicas entry {rp} matches {len(hits)} objects")
        hits[0].setdefault("spec", {})["replicas"] = rp["count"]
    return objs

# --- the Dockerfile's runtime stage (what a preStop exec can run) --------------
runtime_from = ""
try:
    with open(os.path.join(deploy, "Dockerfile")) as f:
        froms = re.findall(r"^FROM\s+(\S+)", f.read(), re.M | re.I)
    runtime_from = froms[-1] if froms else ""
except OSError:
    pass

def flag_of_arg(a):
    m = re.match(r"^--([a-z][a-z0-9-]*)(=|$)", a)
    return m.group(1) if m else None

def env_flag(n):
    return n[len("TICKETING_"):].lower().replace("_", "-")

# --- the checks of one rendering ------------------------------------------------
def check_render(label, objs, want_replicas):
    def ck(cond, msg):
        return check(cond, f"{label}: {msg}")

    byname = {}
    for o in objs:
        byname[(o.get("kind"), (o.get("metadata") or {}).get("name"))] = o

    def get(kind, name):
        v = byname.get((kind, name))
        ck(v is not None, f"no {kind} {name}")
        return v or {}

    # Flags used by the containers exist.
    containers = []
    for o in objs:
        if o.get("kind") in ("StatefulSet", "Deployment", "DaemonSet", "Job"):
            ps = o["spec"]["template"]["spec"]
        elif o.get("kind") == "Pod":
            ps = o["spec"]
        else:
            continue
        for c in ps.get("containers", []):
            containers.append((o["metadata"]["name"], c, ps))
    used = []
    for owner, c, _ in containers:
        for a in (c.get("command") or [])[1:] + (c.get("args") or []):
            f = flag_of_arg(str(a))
            if f:
                used.append((f, f"{owner}: argument {a}"))
        for e in c.get("env") or []:
            n = e.get("name", "")
            if n.startswith("TICKETING_"):
                used.append((env_flag(n), f"{owner}: env {n}"))
    ck(used, "the manifests use no ticketingd flag at all")
    for f, where in used:
        ck(f in flags, f"{where}: --{f} is not a ticketingd flag (see ticketingd --help)")
    ck(not any(f == "force-new-domain" for f, _ in used),
       "--force-new-domain must never be in the pod template (README, majority loss)")

    sts = get("StatefulSet", "ticketing")
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    sel = spec.get("selector", {}).get("matchLabels", {})
    ck(sel and all(labels.get(k) == v for k, v in sel.items()),
       "StatefulSet selector does not match its pod labels")
    replicas = spec.get("replicas")
    ck(replicas in (3, 5), f"StatefulSet replicas is {replicas}, must be 3 or 5")
    if want_replicas is not None:
        ck(replicas == want_replicas, f"replicas is {replicas}, expected {want_replicas}")
    ck(spec.get("podManagementPolicy") == "Parallel",
       "podManagementPolicy must be Parallel (bootstrap needs every pod up at once)")

    us = spec.get("updateStrategy") or {}
    ru = us.get("rollingUpdate") or {}
    ck(us.get("type") == "RollingUpdate",
       f"updateStrategy.type is {us.get('type')}, must be RollingUpdate")
    ck(ru.get("partition", 0) == 0, "updateStrategy.rollingUpdate.partition must be 0 or unset")
    ck(ru.get("maxUnavailable", 1) == 1,
       "updateStrategy.rollingUpdate.maxUnavailable must be 1 or unset")

    headless = get("Service", spec.get("serviceName", ""))
    hs = headless.get("spec", {})
    ck(hs.get("clusterIP") == "None", "the StatefulSet's serviceName must be a headless Service")
    ck(hs.get("publishNotReadyAddresses") is True,
       "the headless Service needs publishNotReadyAddresses: true")
    ck(all(labels.get(k) == v for k, v in (hs.get("selector") or {}).items())
       and hs.get("selector"), "the headless Service does not select the pods")

    c = next((c for n, c, _ in containers if n == "ticketing"), {})
    args = {}
    for a in c.get("args") or []:
        m = re.match(r"^--([a-z-]+)=(.*)$", str(a))
        if m:
            args[m.group(1)] = m.group(2)
    env = {e["name"]: e.get("value") for e in c.get("env") or []}
    names = [e["name"] for e in c.get("env") or []]
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    client_port = int(args.get("port", env.get("TICKETING_PORT") or 7400))
    peer_port = int(args.get("peer-port", env.get("TICKETING_PEER_PORT") or client_port + 1))
    admin_port = int(args.get("admin-port", env.get("TICKETING_ADMIN_PORT") or client_port + 2))
    ck(ports == {"client": client_port, "peer": peer_port, "admin": admin_port},
       f"container ports {ports} do not match client/peer/admin "
       f"{client_port}/{peer_port}/{admin_port}")
    svc_dom = f"{spec.get('serviceName')}.$(POD_NAMESPACE).svc"
    ck(str(env.get("PEER_DOMAIN", "")).startswith(svc_dom),
       f"PEER_DOMAIN should start with {svc_dom}")
    peers_src = args.get("peers") or env.get("TICKETING_PEERS") or ""
    peers = peers_src.split(",")
    want = [f"{sts['metadata']['name']}-{i}.$(PEER_DOMAIN):{peer_port}"
            for i in range(replicas or 0)]
    ck(peers == want, f"--peers is {peers}, expected {want}")
    if want_replicas is not None:
        ck(len(peers) == want_replicas,
           f"--peers lists {len(peers)} addresses, expected {want_replicas}")
    ck(args.get("advertise") == f"$(POD_NAME).$(PEER_DOMAIN):{client_port}",
       "--advertise must be $(POD_NAME).$(PEER_DOMAIN):<client port>")
    for var in ("POD_NAME", "POD_NAMESPACE", "PEER_DOMAIN"):
        ck(var in names, f"env {var} missing")
    # $(VAR) expands only from variables defined earlier in the list.
    order = [("POD_NAMESPACE", "PEER_DOMAIN")]
    if "TICKETING_PEERS" in names:
        order.append(("PEER_DOMAIN", "TICKETING_PEERS"))
    for a, b in order:
        ck({a, b} <= set(names) and names.index(a) < names.index(b),
           f"env {a} must be defined before {b} uses it")

    # envFrom: only optional ConfigMaps (the recovery switch), never required.
    cm_refs = []
    for ef in c.get("envFrom") or []:
        ref = ef.get("configMapRef")
        ck(ref is not None and ref.get("optional") is True,
           f"envFrom {ef}: only optional configMapRefs are expected")
        if ref:
            cm_refs.append(ref.get("name"))

    # Probes.
    def probe(name):
        return c.get(name) or {}
    def hits(p, path):
        g = p.get("httpGet") or {}
        return g.get("path") == path and g.get("port") in ("admin", admin_port)
    def budget(p):
        return int(p.get("periodSeconds", 10)) * int(p.get("failureThreshold", 3))
    rp, lp, sp = probe("readinessProbe"), probe("livenessProbe"), probe("startupProbe")
    ck(hits(rp, "/readyz"), "readinessProbe must GET /readyz on the admin port")
    ck(hits(lp, "/healthz"), "livenessProbe must GET /healthz on the admin port")
    ck(budget(lp) >= 30, f"livenessProbe tolerates {budget(lp)} s of failures, want >= 30")
    ck(hits(sp, "/healthz"), "startupProbe must GET /healthz on the admin port")
    ck(budget(sp) >= 120, f"startupProbe allows {budget(sp)} s to start, want >= 120")

    # preStop, and a grace period that covers it and the handover (<= 3 s).
    pre = (c.get("lifecycle") or {}).get("preStop") or {}
    ck(pre, "no preStop hook")
    pre_s = 0
    if "exec" in pre:
        cmd = [str(x) for x in (pre["exec"].get("command") or [])]
        is_sleep = len(cmd) == 2 and os.path.basename(cmd[0]) == "sleep" and cmd[1].isdigit()
        ck(is_sleep, f"preStop exec {cmd}: expected [sleep, N]")
        pre_s = int(cmd[1]) if is_sleep else 0
        ck(re.match(r"^(debian|ubuntu)[:@]", runtime_from),
           f"preStop runs sleep in the image, whose runtime stage is {runtime_from or '?'}"
           " (need a base with coreutils, or the sleep action)")
    elif "sleep" in pre:
        pre_s = int(pre["sleep"].get("seconds", 0))
    grace = int(pod.get("terminationGracePeriodSeconds", 30))
    ck(grace >= pre_s + 3 + 2, f"terminationGracePeriodSeconds {grace} does not cover the "
       f"preStop ({pre_s} s), the 3 s leadership handover and 2 s to close")

    ck(get("Service", "ticketing") is not None, "no client Service")
    client_svc = byname.get(("Service", "ticketing"), {}).get("spec", {})
    ck(any(p.get("port") == client_port for p in client_svc.get("ports", [])),
       "the client Service does not expose the client port")
    ck(client_svc.get("clusterIP") != "None", "the client Service should not be headless")

    # Secret files are mounted from Secrets.
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in c.get("volumeMounts") or []}
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    for flag in ("client-secret-file", "peer-secret-file"):
        path = args.get(flag) or env.get("TICKETING_" + flag.upper().replace("-", "_"))
        ck(path, f"--{flag} not set")
        if not path:
            continue
        d, f = os.path.split(path)
        sec = vols.get(mounts.get(d, ""), {}).get("secret")
        ck(sec is not None, f"--{flag} {path}: not on a volume mounted from a Secret")
        if sec:
            items = [i["path"] for i in sec.get("items") or []]
            ck(not items or f in items, f"--{flag} {path}: the Secret volume has no item {f}")

    aff = pod.get("affinity", {}).get("podAntiAffinity", {})
    ck(aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
       "podAntiAffinity (one member per node) is missing")

    pdb = get("PodDisruptionBudget", "ticketing").get("spec", {})
    ck(pdb.get("maxUnavailable") == 1, "the PodDisruptionBudget must have maxUnavailable: 1")
    ck("minAvailable" not in pdb, "the PodDisruptionBudget must not also set minAvailable")
    ck(pdb.get("unhealthyPodEvictionPolicy", "IfHealthyBudget") == "IfHealthyBudget",
       "the PodDisruptionBudget must keep unhealthyPodEvictionPolicy IfHealthyBudget")
    ck(all(labels.get(k) == v for k, v in (pdb.get("selector", {}).get("matchLabels") or {}).items())
       and pdb.get("selector"), "the PodDisruptionBudget does not select the pods")

    # Security: Pod Security "restricted", with the Localhost seccomp profile.
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    prof = csc.get("seccompProfile") or psc.get("seccompProfile") or {}
    ck(prof.get("type") == "Localhost",
       f"seccompProfile is {prof.get('type')}, must be Localhost (RuntimeDefault blocks io_uring)")
    lp = str(prof.get("localhostProfile", ""))
    ck(lp.startswith("ticketing/") and
       os.path.isfile(os.path.join(deploy, "seccomp", lp[len("ticketing/"):])),
       f"localhostProfile {lp!r} is not ticketing/<a file of deploy/seccomp/>")
    ck("Unconfined" not in json.dumps(pod), "Unconfined appears in the pod template")
    ck(psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True, "runAsNonRoot: true missing")
    ck(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false missing")
    ck((csc.get("capabilities") or {}).get("drop") == ["ALL"], "capabilities must drop [ALL]")
    ck(not (csc.get("capabilities") or {}).get("add"), "no capability may be added")
    ck(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true missing")
    ck(not any(pod.get(x) for x in ("hostNetwork", "hostPID", "hostIPC")),
       "host namespaces are not allowed")
    ck(all(set(v) <= {"name", "secret", "configMap", "emptyDir", "projected", "downwardAPI"}
           for v in pod.get("volumes") or []),
       "only secret, configMap, emptyDir, projected and downwardAPI volumes (restricted)")

    # --max-keys fits the memory limit, by the sizing line of the manifest.
    mk = args.get("max-keys") or env.get("TICKETING_MAX_KEYS")
    ck(mk and str(mk).isdigit(), "--max-keys (TICKETING_MAX_KEYS) must be set to a number")
    lim = str(((c.get("resources") or {}).get("limits") or {}).get("memory", ""))
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}
    lm = re.match(r"^(\d+)(Ki|Mi|Gi|Ti|K|M|G)?$", lim)
    ck(lm, f"memory limit {lim!r} missing or not understood")
    if mk and str(mk).isdigit() and lm and sizing:
        limit_b = int(lm.group(1)) * units.get(lm.group(2) or "", 1)
        per_key, share = sizing
        ck(int(mk) * per_key <= limit_b * share / 100,
           f"--max-keys {mk} x {per_key} B = {int(mk) * per_key} B is more than {share}% of the "
           f"memory limit {lim} ({int(limit_b * share / 100)} B)")

    # NetworkPolicy: peer port from the members only, client port from
    # ticketing-client pods, admin port from the members and Prometheus in
    # the monitoring namespace; nothing else.
    pols = [o for o in objs if o.get("kind") == "NetworkPolicy"]
    ck(len(pols) == 1, f"{len(pols)} NetworkPolicies, expected 1")
    np = (pols[0] if pols else {}).get("spec", {})
    ck((np.get("podSelector") or {}).get("matchLabels") == sel,
       "the NetworkPolicy does not select exactly the StatefulSet's pods")
    ck(np.get("policyTypes") == ["Ingress"], "the NetworkPolicy must have policyTypes [Ingress]")
    allowed = {}
    for rule in np.get("ingress") or []:
        froms = rule.get("from") or []
        ports_ = rule.get("ports") or []
        ck(froms and ports_, f"ingress rule {rule} allows every source or every port")
        for f in froms:
            ck(not f.get("ipBlock"), f"ingress from an ipBlock: {f}")
            key = json.dumps(f, sort_keys=True)
            for pt in ports_:
                ck(pt.get("port") in ports and pt.get("protocol", "TCP") == "TCP",
                   f"ingress port {pt} is not a TCP container port name")
                allowed.setdefault(pt.get("port"), set()).add(key)
    members = json.dumps({"podSelector": {"matchLabels": sel}}, sort_keys=True)
    clients = json.dumps({"podSelector": {"matchLabels": {"ticketing-client": "true"}}},
                         sort_keys=True)
    prom = json.dumps({"namespaceSelector": {"matchLabels":
                                             {"kubernetes.io/metadata.name": "monitoring"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
                      sort_keys=True)
    ck(allowed.get("peer") == {members}, f"peer port open to {allowed.get('peer')}, "
       "expected the members only")
    ck(allowed.get("client") == {clients}, f"client port open to {allowed.get('client')}, "
       "expected ticketing-client: \"true\" pods only")
    ck(allowed.get("admin") == {members, prom}, f"admin port open to {allowed.get('admin')}, "
       "expected the members and Prometheus in the monitoring namespace")
    return len(used), cm_refs

# --- the sizing line of the StatefulSet (--max-keys against the memory limit) --------
sizing = None
with open(os.path.join(deploy, "base", "statefulset.yaml")) as f:
    m = re.search(r"^\s*# sizing: (\d+) bytes per key at peak, keys at most (\d+)% of the memory limit$",
                  f.read(), re.M)
if check(m, "base/statefulset.yaml: no '# sizing: N bytes per key at peak, keys at most P% "
         "of the memory limit' line"):
    sizing = (int(m.group(1)), int(m.group(2)))
    check(sizing[1] <= 60, f"the sizing line lets keys use {sizing[1]}% of the limit (at most 60)")

# --- render and check the base and every overlay ----------------------------------
renders = [("deploy/", deploy, 3)]
overlays = sorted(glob.glob(os.path.join(deploy, "overlays", "*", "kustomization.yaml")))
for kp in overlays:
    d = os.path.dirname(kp)
    renders.append((rel(d) + "/", d, 5 if os.path.basename(d) == "five-members" else None))
check(any(os.path.basename(os.path.dirname(kp)) == "five-members" for kp in overlays),
      "no overlays/five-members/kustomization.yaml")

def keyed(objs):
    return {(o.get("kind"), (o.get("metadata") or {}).get("name")):
            json.dumps(o, sort_keys=True) for o in objs}

def render_both(label, d):
    """check.sh's rendering of d, compared with kubectl's where there is one."""
    try:
        objs = render(d)
    except (Unsupported, OSError, yaml.YAMLError) as e:
        check(False, f"{label}: cannot render: {e}")
        return None
    if kdir:
        kfile = os.path.join(kdir, label.rstrip("/").replace("/", "_") + ".yaml")
        with open(kfile) as f:
            kobjs = [o for o in yaml.safe_load_all(f) if o is not None]
        mine, theirs = keyed(objs), keyed(kobjs)
        check(mine == theirs, f"{label}: kubectl kustomize renders other objects than check.sh"
              f" does: {sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))}")
    return objs

n_used, cm_refs, base_objs = 0, set(), []
for label, d, want in renders:
    objs = render_both(label, d)
    if objs is None:
        continue
    if label == "deploy/":
        base_objs = objs
    u, refs = check_render(label, objs, want)
    n_used += u
    cm_refs |= set(refs)

# --- monitoring/: ServiceMonitor, PrometheusRule, dashboard, metric names ----------
mondir = os.path.join(deploy, "monitoring")
mobjs = render_both("deploy/monitoring/", mondir) or []
check(sorted(o.get("kind") for o in mobjs) == ["PrometheusRule", "ServiceMonitor"],
      f"deploy/monitoring/ renders {sorted(o.get('kind') for o in mobjs)}, expected a "
      "PrometheusRule and a ServiceMonitor")
check(not any(o.get("kind") in ("ServiceMonitor", "PrometheusRule") for o in base_objs),
      "deploy/ must not need the Prometheus operator's CRDs (monitoring/ is optional)")
svcs = [o for o in base_objs if o.get("kind") == "Service"]
for sm in (o for o in mobjs if o.get("kind") == "ServiceMonitor"):
    sp = sm.get("spec", {})
    ml = (sp.get("selector") or {}).get("matchLabels") or {}
    picked = [v for v in svcs if ml and all(
        ((v.get("metadata") or {}).get("labels") or {}).get(k) == x for k, x in ml.items())]
    eps = sp.get("endpoints") or []
    check(len(eps) == 1, "the ServiceMonitor must have one endpoint")
    for ep in eps:
        check(ep.get("path") == "/metrics", "the ServiceMonitor must scrape /metrics")
        scraped = [v["metadata"]["name"] for v in picked
                   if any(p.get("name") == ep.get("port") for p in v["spec"].get("ports", []))]
        check(scraped == ["ticketing-peers"],
              f"the ServiceMonitor's port {ep.get('port')!r} is on {scraped} of the Services it "
              "selects, expected ticketing-peers only (every member, ready or not)")
        adm = [p for p in next((v["spec"]["ports"] for v in svcs
                                if v["metadata"]["name"] == "ticketing-peers"), [])
               if p.get("name") == ep.get("port")]
        check(adm and adm[0].get("targetPort") == "admin",
              "the scraped Service port must target the container's admin port")

with open(os.path.join(mondir, "alerts.rules.yml")) as f:
    rules = yaml.safe_load(f)
pr = next((o for o in mobjs if o.get("kind") == "PrometheusRule"), {})
check(pr.get("spec", {}).get("groups") == rules.get("groups"),
      "monitoring/prometheusrule.yaml does not hold the groups of alerts.rules.yml: "
      "run deploy/monitoring/prometheusrule.py > deploy/monitoring/prometheusrule.yaml")
import subprocess
gen = subprocess.run([sys.executable, os.path.join(mondir, "prometheusrule.py")],
                     capture_output=True, text=True, timeout=60)
with open(os.path.join(mondir, "prometheusrule.yaml")) as f:
    check(gen.returncode == 0 and gen.stdout == f.read(),
          "monitoring/prometheusrule.yaml is not the output of prometheusrule.py: run "
          "deploy/monitoring/prometheusrule.py > deploy/monitoring/prometheusrule.yaml")
want_alerts = {"TicketingNoLeader", "TicketingMemberLagging", "TicketingQuorumAtRisk",
               "TicketingKeysNearBound", "TicketingWaitersNearBound",
               "TicketingConnectionsNearBound", "TicketingLogNearBound", "TicketingPodRestarted"}
alerts = [r for g in rules.get("groups", []) for r in g.get("rules", []) if "alert" in r]
have = {r["alert"] for r in alerts}
check(want_alerts <= have, f"alerts.rules.yml lacks {sorted(want_alerts - have)}")
with open(os.path.join(mondir, "alerts.test.yml")) as f:
    tests = yaml.safe_load(f)
tested = {}
for t in tests.get("tests", []):
    for a in t.get("alert_rule_test", []):
        tested.setdefault(a["alertname"], set()).add(bool(a.get("exp_alerts")))
for a in sorted(have):
    check(tested.get(a) == {True, False},
          f"alerts.test.yml must test {a} both firing and not firing")

# The metrics ticketingd exposes: what the rules and the dashboard may query.
# docs/metrics.md lists every family with its type (integ_test_metrics
# checks that list against a live node's /metrics), so it is the source.
KNOWN = set()
for row in open(os.path.join(deploy, "..", "docs", "metrics.md")):
    m = re.match(r"\|\s*`([a-z_:][a-z0-9_:]*)`\s*\|\s*(counter|gauge|histogram)\s*\|", row)
    if m:
        name, kind = m.groups()
        KNOWN |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
check(len(KNOWN) > 20, f"docs/metrics.md: only {len(KNOWN)} metrics found in its table")
FUNCS = set("""abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min
count_over_time deriv delta exp floor histogram_quantile idelta increase irate label_join
label_replace ln log2 log10 max_over_time min_over_time predict_linear quantile_over_time rate
resets round scalar sort sort_desc sqrt stddev_over_time sum_over_time time timestamp vector
last_over_time present_over_time sum min max avg count stddev stdvar topk bottomk quantile
count_values group""".split())
WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
         "unless", "bool", "offset", "inf", "nan"}

def metric_names(expr, where):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)
    e = re.sub(r"\$\{?\w+\}?", "1", e)
    out = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        tok, after = m.group(0), e[m.end():].lstrip()
        if tok.lower() in WORDS:
            continue
        if after.startswith("(") or re.match(r"(by|without)\b", after):
            check(tok in FUNCS, f"{where}: unknown PromQL function {tok} in {expr!r}")
        else:
            out.add(tok)
    check(out, f"{where}: no metric in {expr!r}")
    for n in out:
        check(n in KNOWN, f"{where}: {n} is not a metric ticketingd exposes ({expr!r})")
    return out

for r in alerts:
    metric_names(r["expr"], f"alerts.rules.yml {r['alert']}")
for t in tests.get("tests", []):
    for ser in t.get("input_series", []):
        n = ser["series"].split("{")[0]
        check(n in KNOWN, f"alerts.test.yml: input series {n} is not a metric ticketingd exposes")

with open(os.path.join(mondir, "grafana-dashboard.json")) as f:
    dash = json.load(f)
dash_names = set()
def walk(ps):
    for p in ps:
        if p.get("type") == "row":
            walk(p.get("panels") or [])
            continue
        check(p.get("targets"), f"grafana-dashboard.json: panel {p.get('title')!r} has no query")
        for t in p.get("targets") or []:
            dash_names.update(metric_names(t.get("expr", ""),
                                           f"grafana-dashboard.json {p.get('title')!r}"))
walk(dash.get("panels") or [])
for v in (dash.get("templating") or {}).get("list", []):
    q = v.get("query")
    q = q.get("query", "") if isinstance(q, dict) else str(q or "")
    for n in re.findall(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", q):
        check(n in KNOWN, f"grafana-dashboard.json variable {v.get('name')}: {n} is not a metric")
for n in ("ticketing_raft_is_leader", "ticketing_raft_term", "ticketing_requests_total",
          "ticketing_responses_total", "ticketing_acquire_seconds_bucket",
          "ticketing_wait_seconds_bucket", "ticketing_keys", "ticketing_keys_max",
          "ticketing_waiters", "ticketing_waiters_max", "ticketing_raft_commit_seconds_bucket",
          "ticketing_raft_member_lag_entries", "ticketing_peer_link_up",
          "process_cpu_seconds_total", "process_resident_memory_bytes"):
    check(n in dash_names, f"grafana-dashboard.json shows no {n}")

# --- seccomp/: the profile allows what the trace saw, and io_uring ----------------
with open(os.path.join(deploy, "seccomp", "ticketingd.json")) as f:
    prof = json.load(f)
check(prof.get("defaultAction") in ("SCMP_ACT_ERRNO", "SCMP_ACT_KILL_PROCESS"),
      "seccomp/ticketingd.json must deny by default")
allow = [n for r in prof.get("syscalls", []) if r.get("action") == "SCMP_ACT_ALLOW"
         for n in r.get("names", [])]
check(len(allow) == len(set(allow)), "seccomp/ticketingd.json names a call twice")
with open(os.path.join(deploy, "seccomp", "observed.txt")) as f:
    seen = f.read().split()
check(len(seen) > 20, "seccomp/observed.txt looks empty")
miss = sorted(set(seen + ["io_uring_setup", "io_uring_enter", "io_uring_register"]) - set(allow))
check(not miss, f"seccomp/ticketingd.json does not allow {miss}")

# --- the README's recovery command matches the manifests ----------------------------
try:
    with open(os.path.join(deploy, "README.md")) as f:
        readme = f.read()
except OSError:
    readme = ""
cmds = re.findall(r"kubectl create configmap (\S+)\s+(?:\\\n\s*)?--from-literal=(\w+)=(\S+)",
                  readme)
check(cmds, "deploy/README.md: no 'kubectl create configmap ... --from-literal=' recovery command")
for name, key, val in cmds:
    check(name in cm_refs, f"deploy/README.md: configmap {name} is not read by the pods "
          f"(envFrom names {sorted(cm_refs)})")
    check(key.startswith("TICKETING_") and env_flag(key) in flags,
          f"deploy/README.md: {key} is not a ticketingd flag's variable")

for e in errors:
    print(f"deploy/check.sh: FAIL: {e}")
print(f"deploy/check.sh: {checks - len(errors)} of {checks} checks passed over"
      f" {len(renders)} renderings ({n_used} flag uses against {len(flags)} ticketingd flags)")
sys.exit(1 if errors else 0)
PY

if [ -z "$kdir" ]; then
  echo "deploy/check.sh: SKIP: everything else passed, but there is no kubectl to render with"
  exit 77
fi
echo "deploy/check.sh: $kubectl kustomize renders the same objects"
echo "deploy/check.sh: PASS"
