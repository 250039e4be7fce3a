// Subgraphs in the panel: a run's node rows grouped under their subgraph roll-ups (the report's
// `subgraphs`, monitors/engine/subgraphs.py), the badge of a subgraph node, and the walk from the
// canvas's root graph into every subgraph with the compound id prefix of its nodes ("54:" inside
// the instance 54, "54:62:" inside 62 inside 54). Pure, no DOM; the graph walk reads only the
// LiteGraph fields every frontend with subgraphs has (`nodes`, `id`, an instance's `subgraph`).
import { formatBytes, formatSeconds, isNumber } from "./format.mjs";

/**
 * @typedef {{device: string, peak_allocated_bytes?: number | null, peak_allocated_above_start_bytes?: number | null}} SubgraphGpuPeak
 * @typedef {{id: string, parent_id: string | null, name: string | null, name_unknown_reason?: string | null,
 *   node_ids: string[], n_cached: number, start_offset_s?: number | null, wall_s: number | null,
 *   wall_unknown_reason?: string | null, node_time_sum_s?: number | null, peak_rss_bytes?: number | null,
 *   peak_rss_above_start_bytes?: number | null, gpu_peaks?: SubgraphGpuPeak[]}} SubgraphRollup
 */

/** The instance a node id sits in directly: "54:62:174" -> "54:62"; null at the top level. @param {string} id */
export function parentSubgraph(id) {
  const at = String(id).lastIndexOf(":");
  return at < 0 ? null : String(id).slice(0, at);
}

/** @param {SubgraphRollup} s */
export function subgraphName(s) {
  return s.name || `subgraph ${s.id}`;
}

/** The memory a subgraph's nodes added at most: GPU allocated where measured, else RSS. @param {SubgraphRollup} s */
export function subgraphAdded(s) {
  const gpu = (s.gpu_peaks ?? []).map((p) => p.peak_allocated_above_start_bytes).filter(isNumber);
  if (gpu.length) return { bytes: Math.max(...gpu), gpu: true };
  return isNumber(s.peak_rss_above_start_bytes) ? { bytes: s.peak_rss_above_start_bytes, gpu: false } : null;
}

/**
 * The badge text of a subgraph node: its wall-clock time and the most a node inside added
 * ("1.25 s wall · +40 MiB GPU"); "cached" when none of its nodes ran.
 * @param {SubgraphRollup} s
 */
export function subgraphBadgeText(s) {
  if (!isNumber(s.wall_s)) return s.node_ids?.length ? "cached" : null;
  const added = subgraphAdded(s);
  const memory = added && added.bytes > 0 ? ` · +${formatBytes(added.bytes)}${added.gpu ? " GPU" : ""}` : "";
  return `${formatSeconds(s.wall_s)} wall${memory}`;
}

/**
 * The node table's lines: subgraph heads with their nodes below (nested ones inside), each level
 * in the order `sortRows` gave; a collapsed subgraph hides what is below it.
 * @template {{nodeId: string}} R
 * @param {R[]} rows sorted node rows
 * @param {SubgraphRollup[]} subgraphs the report's roll-ups
 * @param {Set<string>} collapsed ids of the collapsed subgraphs
 * @returns {({kind: "node", row: R, depth: number} | {kind: "subgraph", subgraph: SubgraphRollup, depth: number, collapsed: boolean})[]}
 */
export function groupedLines(rows, subgraphs, collapsed) {
  const known = new Map(subgraphs.map((s) => [s.id, s]));
  /** @type {Map<string | null, any[]>} parent id -> its children (rows and subgraphs), in row order */
  const children = new Map();
  const place = (/** @type {string | null} */ parent, /** @type {any} */ item) => {
    const listed = children.get(parent) ?? [];
    listed.push(item);
    children.set(parent, listed);
  };
  const placed = new Set();
  const placeSubgraph = (/** @type {string} */ id) => {
    if (placed.has(id)) return;
    placed.add(id);
    const parent = known.get(id)?.parent_id ?? null;
    if (parent !== null && known.has(parent)) placeSubgraph(parent);
    place(parent !== null && known.has(parent) ? parent : null, { subgraph: known.get(id) });
  };
  for (const row of rows) {
    let parent = parentSubgraph(row.nodeId);
    while (parent !== null && !known.has(parent)) parent = parentSubgraph(parent); // a report without that roll-up
    if (parent !== null) placeSubgraph(parent);
    place(parent, { row });
  }
  /** @type {any[]} */
  const lines = [];
  const walk = (/** @type {string | null} */ parent, /** @type {number} */ depth) => {
    for (const item of children.get(parent) ?? []) {
      if (item.row) {
        lines.push({ kind: "node", row: item.row, depth });
        continue;
      }
      const closed = collapsed.has(item.subgraph.id);
      lines.push({ kind: "subgraph", subgraph: item.subgraph, depth, collapsed: closed });
      if (!closed) walk(item.subgraph.id, depth + 1);
    }
  };
  walk(null, 0);
  return lines;
}

/** Whether a LiteGraph node is a subgraph instance. @param {any} node */
export function isSubgraphNode(node) {
  return Boolean(node?.subgraph && Array.isArray(node.subgraph.nodes));
}

/**
 * Every graph reachable from the root with the compound id prefix of its nodes: the root with "",
 * each subgraph through its first instance ("54:", then "54:62:"), as the frontend itself maps an
 * open subgraph to execution ids. Bounded against cycles.
 * @param {any} root the root LGraph
 * @returns {{graph: any, prefix: string}[]}
 */
export function graphsWithPrefixes(root) {
  /** @type {{graph: any, prefix: string}[]} */
  const found = [];
  const seen = new Set();
  const visit = (/** @type {any} */ graph, /** @type {string} */ prefix) => {
    if (!graph || seen.has(graph) || found.length > 500) return;
    seen.add(graph);
    found.push({ graph, prefix });
    for (const node of Array.isArray(graph.nodes) ? graph.nodes : []) {
      if (isSubgraphNode(node)) visit(node.subgraph, `${prefix}${node.id}:`);
    }
  };
  visit(root, "");
  return found;
}

/**
 * The instance nodes to open, outermost first, and the node itself, for a compound id
 * ("54:62:174": instance 54 at the root, 62 inside it, node 174 inside that); null when the graph
 * on screen has no such path.
 * @param {any} root the root LGraph
 * @param {string} nodeId
 * @returns {{instances: any[], node: any} | null}
 */
export function resolveNodePath(root, nodeId) {
  const parts = String(nodeId).split(":");
  const byId = (/** @type {any} */ graph, /** @type {string} */ id) => {
    const listed = (Array.isArray(graph?.nodes) ? graph.nodes : []).find((/** @type {any} */ n) => String(n.id) === id);
    if (listed || typeof graph?.getNodeById !== "function") return listed ?? null;
    return graph.getNodeById(Number.isNaN(Number(id)) ? id : Number(id)) ?? null;
  };
  const instances = [];
  let graph = root;
  for (const part of parts.slice(0, -1)) {
    const instance = byId(graph, part);
    if (!isSubgraphNode(instance)) return null;
    instances.push(instance);
    graph = instance.subgraph;
  }
  const node = byId(graph, parts[parts.length - 1]);
  return node ? { instances, node } : null;
}
