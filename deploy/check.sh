#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/ without a cluster:
#  - every *.yaml parses (PyYAML) and every object has apiVersion, kind and
#    metadata.name;
#  - every ticketingd flag the manifests use, as an argument (--flag[=v]) or
#    as an environment variable (TICKETING_FLAG), exists in
#    `ticketingd --help`;
#  - the pieces fit together: the StatefulSet's serviceName is a headless
#    Service with publishNotReadyAddresses; replicas is 3 or 5 and --peers
#    lists exactly the pods' stable names; pods start in parallel; probes hit
#    /readyz and /healthz on the admin port; the secret files are mounted
#    from Secrets; the PodDisruptionBudget allows one pod down and selects
#    the pods; kustomization.yaml lists files that exist;
#  - `kubectl kustomize` renders the directory, where kubectl exists.
#
# Usage: deploy/check.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/ticketingd)
# Exit: 0 pass, 1 fail, 77 skip (no ticketingd binary, or no Python with PyYAML).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build}
bin=$build/ticketingd
if [ ! -x "$bin" ]; then
  echo "deploy/check.sh: SKIP: no ticketingd at $bin (build first)"
  exit 77
fi

py=""
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' 2>/dev/null; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "deploy/check.sh: SKIP: no python3 with PyYAML (apt-get install python3-yaml)"
  exit 77
fi

help=$("$bin" --help)

"$py" - "$here" "$help" <<'PY'
import glob, os, re, sys
import yaml

deploy, help_text = sys.argv[1], sys.argv[2]
flags = set(re.findall(r"^\s+--([a-z][a-z0-9-]*)\s", help_text, re.M))
errors, checks = [], 0

def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        errors.append(msg)

check(len(flags) >= 20, "could not read the flags from ticketingd --help")

docs = {}  # (kind, name) -> object
for path in sorted(glob.glob(os.path.join(deploy, "*.yaml"))):
    fname = os.path.basename(path)
    try:
        with open(path) as f:
            objs = [o for o in yaml.safe_load_all(f) if o is not None]
    except yaml.YAMLError as e:
        errors.append(f"{fname}: does not parse: {e}")
        continue
    check(objs, f"{fname}: no YAML documents")
    for o in objs:
        ok = isinstance(o, dict) and "apiVersion" in o and "kind" in o
        check(ok, f"{fname}: a document without apiVersion/kind")
        if not ok:
            continue
        if o["kind"] == "Kustomization":
            docs[("Kustomization", fname)] = o
            continue
        name = (o.get("metadata") or {}).get("name")
        check(bool(name), f"{fname}: {o['kind']} without metadata.name")
        docs[(o["kind"], name)] = (o, fname)

def get(kind, name):
    v = docs.get((kind, name))
    check(v is not None, f"no {kind} {name}")
    return v[0] if v else {}

# --- flags used by the manifests exist ------------------------------------
def flag_of_arg(a):
    m = re.match(r"^--([a-z][a-z0-9-]*)(=|$)", a)
    return m.group(1) if m else None

containers = []
for (kind, name), v in docs.items():
    if kind in ("StatefulSet", "Deployment", "DaemonSet", "Pod", "Job"):
        o = v[0]
        spec = o["spec"]["template"]["spec"] if kind != "Pod" else o["spec"]
        for c in spec.get("containers", []):
            containers.append((name, c, spec))

used = []
for sts, c, _ in containers:
    for a in (c.get("command") or [])[1:] + (c.get("args") or []):
        f = flag_of_arg(str(a))
        if f:
            used.append((f, f"{sts}: argument {a}"))
    for e in c.get("env") or []:
        n = e.get("name", "")
        if n.startswith("TICKETING_"):
            used.append((n[len("TICKETING_"):].lower().replace("_", "-"), f"{sts}: env {n}"))
check(used, "the manifests use no ticketingd flag at all")
for f, where in used:
    check(f in flags, f"{where}: --{f} is not a ticketingd flag (see ticketingd --help)")

# --- the StatefulSet and its Services fit together -------------------------
sts = get("StatefulSet", "ticketing")
spec = sts.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
sel = spec.get("selector", {}).get("matchLabels", {})
check(sel and all(labels.get(k) == v for k, v in sel.items()),
      "StatefulSet selector does not match its pod labels")
replicas = spec.get("replicas")
check(replicas in (3, 5), f"StatefulSet replicas is {replicas}, must be 3 or 5")
check(spec.get("podManagementPolicy") == "Parallel",
      "podManagementPolicy must be Parallel (bootstrap needs every pod up at once)")

headless = get("Service", spec.get("serviceName", ""))
hs = headless.get("spec", {})
check(hs.get("clusterIP") == "None", "the StatefulSet's serviceName must be a headless Service")
check(hs.get("publishNotReadyAddresses") is True,
      "the headless Service needs publishNotReadyAddresses: true")
check(all(labels.get(k) == v for k, v in (hs.get("selector") or {}).items()) and hs.get("selector"),
      "the headless Service does not select the pods")

c = next((c for n, c, _ in containers if n == "ticketing"), {})
args = {}
for a in c.get("args") or []:
    m = re.match(r"^--([a-z-]+)=(.*)$", str(a))
    if m:
        args[m.group(1)] = m.group(2)
env = {e["name"]: e.get("value") for e in c.get("env") or []}
ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
client_port = int(args.get("port", env.get("TICKETING_PORT") or 7400))
peer_port = int(args.get("peer-port", env.get("TICKETING_PEER_PORT") or client_port + 1))
admin_port = int(args.get("admin-port", env.get("TICKETING_ADMIN_PORT") or client_port + 2))
check(ports == {"client": client_port, "peer": peer_port, "admin": admin_port},
      f"container ports {ports} do not match client/peer/admin {client_port}/{peer_port}/{admin_port}")
svc_dom = f"{spec.get('serviceName')}.$(POD_NAMESPACE).svc"
check(str(env.get("PEER_DOMAIN", "")).startswith(svc_dom),
      f"PEER_DOMAIN should start with {svc_dom}")
peers = (args.get("peers") or env.get("TICKETING_PEERS") or "").split(",")
want = [f"{sts['metadata']['name']}-{i}.$(PEER_DOMAIN):{peer_port}" for i in range(replicas or 0)]
check(peers == want, f"--peers is {peers}, expected {want}")
check(args.get("advertise") == f"$(POD_NAME).$(PEER_DOMAIN):{client_port}",
      "--advertise must be $(POD_NAME).$(PEER_DOMAIN):<client port>")
names = [e["name"] for e in c.get("env") or []]
for var in ("POD_NAME", "POD_NAMESPACE", "PEER_DOMAIN"):
    check(var in names, f"env {var} missing")
check(names.index("POD_NAMESPACE") < names.index("PEER_DOMAIN") if
      {"POD_NAMESPACE", "PEER_DOMAIN"} <= set(names) else False,
      "POD_NAMESPACE must be defined before PEER_DOMAIN uses it")

rp = c.get("readinessProbe", {}).get("httpGet", {})
lp = c.get("livenessProbe", {}).get("httpGet", {})
check(rp.get("path") == "/readyz" and rp.get("port") in ("admin", admin_port),
      "readinessProbe must GET /readyz on the admin port")
check(lp.get("path") == "/healthz" and lp.get("port") in ("admin", admin_port),
      "livenessProbe must GET /healthz on the admin port")

client_svc = get("Service", "ticketing").get("spec", {})
check(any(p.get("port") == client_port for p in client_svc.get("ports", [])),
      "the client Service does not expose the client port")
check(client_svc.get("clusterIP") != "None", "the client Service should not be headless")

# Secret files are mounted from Secrets.
mounts = {m["mountPath"].rstrip("/"): m["name"] for m in c.get("volumeMounts") or []}
vols = {v["name"]: v for v in pod.get("volumes") or []}
for flag in ("client-secret-file", "peer-secret-file"):
    path = args.get(flag) or env.get("TICKETING_" + flag.upper().replace("-", "_"))
    check(path, f"--{flag} not set")
    if not path:
        continue
    d, f = os.path.split(path)
    vol = vols.get(mounts.get(d, ""), {})
    sec = vol.get("secret")
    check(sec is not None, f"--{flag} {path}: not on a volume mounted from a Secret")
    if sec:
        items = [i["path"] for i in sec.get("items") or []]
        check(not items or f in items, f"--{flag} {path}: the Secret volume has no item {f}")

aff = pod.get("affinity", {}).get("podAntiAffinity", {})
check(aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
      "podAntiAffinity (one member per node) is missing")

pdb = get("PodDisruptionBudget", "ticketing").get("spec", {})
check(pdb.get("maxUnavailable") == 1, "the PodDisruptionBudget must allow one pod down")
check(all(labels.get(k) == v for k, v in (pdb.get("selector", {}).get("matchLabels") or {}).items())
      and pdb.get("selector"), "the PodDisruptionBudget does not select the pods")

k = docs.get(("Kustomization", "kustomization.yaml"))
check(k is not None, "no kustomization.yaml")
for r in (k or {}).get("resources", []):
    check(os.path.exists(os.path.join(deploy, r)), f"kustomization.yaml: {r} does not exist")

for e in errors:
    print(f"deploy/check.sh: FAIL: {e}")
print(f"deploy/check.sh: {checks - len(errors)} of {checks} checks passed"
      f" ({len(used)} flag uses against {len(flags)} ticketingd flags)")
sys.exit(1 if errors else 0)
PY

if command -v kubectl >/dev/null 2>&1; then
  if ! kubectl kustomize "$here" >/dev/null; then
    echo "deploy/check.sh: FAIL: kubectl kustomize $here"
    exit 1
  fi
  echo "deploy/check.sh: kubectl kustomize renders deploy/"
fi
echo "deploy/check.sh: PASS"
