// Validates Kubernetes manifests: every document against the Kubernetes API's JSON schema for
// its apiVersion and kind (kubernetes-models, generated from the API's OpenAPI spec; ajv), then
// against what a ddpd deployment needs (docs: deploy/kubernetes/README.md). Prints one line per
// problem, naming the document and the field, and exits 1 if there is any.
//
//   node validate.mjs FILE...
import fs from "node:fs";
import yaml from "js-yaml";

const problems = [];
const documents = [];

// kubernetes-models' module for an apiVersion/kind: core "v1" → v1/Kind, "apps/v1" → apps/v1/Kind.
async function modelFor(apiVersion, kind) {
  const path = `kubernetes-models/${apiVersion}/${kind}`;
  try {
    const module = await import(path);
    return module[kind];
  } catch {
    return null;
  }
}

for (const file of process.argv.slice(2)) {
  let parsed;
  try {
    parsed = yaml.loadAll(fs.readFileSync(file, "utf8"));
  } catch (error) {
    problems.push(`${file}: not YAML: ${error.message.split("\n")[0]}`);
    continue;
  }
  for (const doc of parsed) {
    if (doc == null) continue;
    const where = `${file}: ${doc.kind ?? "?"} ${doc.metadata?.name ?? "?"}`;
    const Model = await modelFor(doc.apiVersion, doc.kind);
    if (!Model) {
      problems.push(`${where}: unknown apiVersion/kind ${doc.apiVersion}/${doc.kind}`);
      continue;
    }
    try {
      new Model(doc).validate();
    } catch (error) {
      problems.push(`${where}: ${error.message.replace(/\n/g, "; ")}`);
    }
    documents.push({ doc, where });
  }
}

// --- ddpd's own requirements ----------------------------------------------------------------
const of = (kind) => documents.filter((d) => d.doc.kind === kind);
const need = (ok, message) => {
  if (!ok) problems.push(message);
};

const statefulSets = of("StatefulSet");
const indexedJobs = of("Job").filter((d) => d.doc.spec?.completionMode === "Indexed");
need(statefulSets.length + indexedJobs.length > 0, "workers: no StatefulSet or indexed Job");
for (const { doc, where } of statefulSets) {
  const service = of("Service").find((s) => s.doc.metadata?.name === doc.spec?.serviceName);
  need(service, `${where}: spec.serviceName names no Service in these manifests`);
  need(!service || service.doc.spec?.clusterIP === "None",
       `${where}: its Service ${doc.spec?.serviceName} is not headless (spec.clusterIP: None)`);
}
const coordinators = of("Deployment").filter((d) =>
  d.doc.spec?.template?.spec?.containers?.some((c) => (c.command ?? []).includes("ddpd-coordinator")));
need(coordinators.length === 1, "coordinator: no Deployment running ddpd-coordinator");
for (const { doc, where } of coordinators) {
  const labels = doc.spec?.template?.metadata?.labels ?? {};
  const service = of("Service").find((s) =>
    Object.entries(s.doc.spec?.selector ?? {}).every(([k, v]) => labels[k] === v) &&
    s.doc.spec?.clusterIP !== "None");
  need(service, `${where}: no Service selects the coordinator's pods`);
}

const secrets = new Set(of("Secret").map((d) => d.doc.metadata?.name));
const claims = new Set(of("PersistentVolumeClaim").map((d) => d.doc.metadata?.name));
for (const { doc, where } of [...of("Deployment"), ...statefulSets, ...indexedJobs]) {
  const pod = doc.spec?.template?.spec ?? {};
  for (const c of pod.containers ?? []) {
    const at = `${where}: container ${c.name}`;
    need(c.readinessProbe, `${at}: no readinessProbe`);
    need(c.livenessProbe, `${at}: no livenessProbe`);
    need(c.resources?.requests?.cpu && c.resources?.requests?.memory,
         `${at}: resources.requests needs cpu and memory`);
    const token = (c.env ?? []).find((e) => e.name === "DDPD_TOKEN");
    need(token?.valueFrom?.secretKeyRef, `${at}: DDPD_TOKEN must come from a Secret (secretKeyRef)`);
    const secret = token?.valueFrom?.secretKeyRef?.name;
    need(!secret || secrets.has(secret), `${at}: DDPD_TOKEN's Secret ${secret} is not in these manifests`);
  }
  for (const v of pod.volumes ?? []) {
    const claim = v.persistentVolumeClaim?.claimName;
    need(!claim || claims.has(claim), `${where}: volume ${v.name} claims ${claim}, not in these manifests`);
  }
}
const mounts = (docs) => docs.flatMap((d) => d.doc.spec?.template?.spec?.volumes ?? [])
  .map((v) => v.persistentVolumeClaim?.claimName).filter(Boolean);
need(mounts(coordinators).length > 0, "coordinator: its SQLite store is on no PersistentVolumeClaim");
need(mounts([...statefulSets, ...indexedJobs]).length > 0,
     "workers: checkpoints are on no PersistentVolumeClaim");

for (const p of problems) console.log(p);
if (problems.length === 0) {
  console.log(`valid: ${documents.length} documents (${documents.map((d) => d.doc.kind).join(", ")})`);
}
process.exit(problems.length === 0 ? 0 : 1);
