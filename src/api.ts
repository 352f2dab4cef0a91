// The one typed client of the jupyter_gpu_ws server API: REST requests and the metrics stream.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export interface IGpuProcess {
  /** As this server sees it; a kernel's own report may lack one. */
  pid: number | null;
  memory_used: number | null;
  kernel_id: string | null;
  kernel_name: string | null;
  notebook: string | null;
  /** False for a PID that is no process here (NVML's host PIDs, seen from a container). */
  visible: boolean;
  /** "nvml", or "kernel:<figure>" when the kernel reported its own use. */
  memory_source: string;
}

export interface IMigDevice {
  index: number;
  uuid: string;
  memory_used: number | null;
  memory_total: number | null;
  processes: IGpuProcess[];
}

export interface IGpu {
  index: number;
  name: string;
  uuid: string;
  utilization: number | null;
  memory_used: number | null;
  memory_total: number | null;
  temperature: number | null;
  power_draw: number | null;
  power_limit: number | null;
  sm_clock: number | null;
  processes: IGpuProcess[];
  mig: IMigDevice[];
}

export interface IDisk {
  label: string;
  path: string;
  used: number;
  total: number;
}

export interface ISystem {
  cpu_percent: number;
  cpu_count: number;
  memory_used: number;
  memory_total: number;
  limits: 'cgroup' | 'host';
  disks: IDisk[];
}

export interface IAlert {
  id: string;
  kind: 'gpu-idle' | 'gpu-memory' | 'disk';
  subject: string;
  message: string;
  since: number;
}

export interface ISample {
  time: number;
  interval: number;
  gpus: IGpu[];
  gpu_error: string | null;
  driver_version: string | null;
  cuda_driver_version: string | null;
  system: ISystem;
  alerts: IAlert[];
}

export interface IMetricsWithHistory extends ISample {
  history: ISample[];
  history_seconds: number;
}

/** An error answered by the server, carrying its message for the user. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
  }
}

/** Call `/gpuws/api/<endPoint>` and parse its JSON answer. */
export async function requestAPI<T>(endPoint: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'gpuws', 'api', endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // not JSON: keep the text for the error message
    }
  }
  if (!response.ok) {
    const message = (data && data.message) || response.statusText || String(data);
    throw new ApiError(response.status, message);
  }
  return data as T;
}

/** The websocket URL of the metrics stream, with the token where the page needs it. */
export function metricsStreamUrl(): string {
  const settings = ServerConnection.makeSettings();
  let url = URLExt.join(settings.wsUrl, 'gpuws', 'api', 'metrics', 'stream');
  if (settings.token && settings.appendToken) {
    url += `?token=${encodeURIComponent(settings.token)}`;
  }
  return url;
}

/** The websocket on which the server asks this page to save its open documents (before a
 * persist). `page` names this page in the persist's report if it ever fails to answer. */
export function documentsStreamUrl(page: string): string {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.wsUrl, 'gpuws', 'api', 'documents', 'stream');
  const query: { [name: string]: string } = { page };
  if (settings.token && settings.appendToken) {
    query.token = settings.token;
  }
  return url + URLExt.objectToQueryString(query);
}

/** Server → page: save every document with unsaved changes, answer within `timeout` seconds. */
export interface ISaveDocumentsRequest {
  type: 'save-documents';
  request_id: string;
  timeout: number;
}

/** A document that could not be saved, and why. */
export interface IDocumentFailure {
  path: string;
  error: string;
}

/** Page → server: the answer to a save request. */
export interface IDocumentsSaved {
  type: 'documents-saved';
  request_id: string;
  saved: string[];
  failed: IDocumentFailure[];
}

/** `result.documents` of a persist job: what the connected pages saved before it. */
export interface IDocumentsReport {
  saved: string[];
  failed: IDocumentFailure[];
  /** Pages asked. */
  browsers: number;
  /** The pages that did not answer in time, by name. */
  unanswered: string[];
}

export interface ILease {
  holder: string;
  host: string;
  pid: number;
  user: string;
  acquired: number;
  heartbeat: number;
  /** What the holder's clock says: shown, never used to judge the lease. */
  expires: number;
  /** The lease's lifetime: free once it has not changed for this long, as measured here. */
  ttl?: number;
  renewals?: number;
  released?: boolean;
}

export interface IJobProgress {
  phase: string;
  files_done: number;
  files_total: number;
  bytes_done: number;
  bytes_total: number;
  current: string | null;
  /** Bytes per second since the work began, once measured. */
  speed?: number | null;
  /** Seconds left at that speed. */
  eta?: number | null;
}

export interface IJob {
  id: string;
  kind: 'persist' | 'restore' | 'env-snapshot' | 'env-restore';
  state: 'running' | 'done' | 'failed' | 'cancelled';
  /** Cancelled, while a step that cannot stop midway finishes: no further step starts. */
  cancelling?: boolean;
  started: number;
  finished: number | null;
  steps: Array<{ name: string; state: string; detail: string | null }>;
  /** What the running step does now, with its own progress ("Checkpointing 2 kernels",
   * "Uploading 3 of 12 files"); null once no step runs. */
  activity?: string | null;
  progress: IJobProgress;
  errors: string[];
  result: { [key: string]: any; summary?: IPersistSummary };
}

/** A finished persist's outcome in one coherent result, worded once by the server
 * (vocabulary.persist_summary) for the panel, `%gpuws persist` and `jupyter gpuws persist`. */
export interface IPersistSummary {
  level: 'ok' | 'warning' | 'error';
  /** "All saved" only when the files are somewhere that outlives this machine. */
  headline: string;
  saved_elsewhere: boolean;
  done: string[];
  stored: string | null;
  errors: string[];
  /** What did not fail the persist but needs the user (a wheel that could not be built). */
  warnings: string[];
  advice: string | null;
  /** The whole line. */
  text: string;
  /** The line without what the store holds and the advice for a store on this disk. */
  short: string;
}

export interface ISyncStatus {
  state:
    | 'starting'
    | 'idle'
    | 'syncing'
    | 'error'
    | 'read-only'
    | 'taking-over'
    | 'disabled'
    | 'running';
  /** Files and bytes not in the store (waiting, uploading, failing, deletions). */
  pending_files: number;
  pending_bytes: number;
  /** Files that cannot be synced for a reason of their own (unreadable, a name too long). */
  problem_files?: number;
  /** The pass in progress, with speed and time left. */
  progress?: IJobProgress | null;
  can_take_over?: boolean;
  /** Why the store is taken to be down; it is asked again by itself. */
  store_down?: string | null;
  /** The store's folder (or this workspace's, synced here before) is not there: a drive that
   * dropped is the store unavailable, never an empty store. Take over starts it anew. */
  store_missing?: boolean;
  versions_bytes?: number | null;
  versions_count?: number | null;
  record_rebuilt?: string | null;
  ignore_problems?: string[];
  lease_writing?: boolean;
  lease_error?: string | null;
  /** False where the store offers no compare-and-swap: the lease is advisory. */
  lease_exclusive?: boolean;
  lease_note?: string | null;
  /** When this runtime takes the lease over by itself if its holder renews it no more (epoch
   * seconds, this machine's clock; it moves on at each renewal). */
  takeover_at?: number | null;
  /** Seconds since this runtime last saw the other holder's lease change (its renewal). */
  lease_unchanged_for?: number | null;
  /** Seconds until writing starts after a take-over. */
  writes_start_in?: number | null;
  restoring?: boolean;
  /** Entries of a local store skipped as links or special files (key to reason). */
  store_skipped?: { [key: string]: string };
  store_skipped_count?: number;
  /** The store is a folder on the work directory's own disk: it goes with the machine. */
  store_same_disk?: boolean;
  /** Null for a plain store; the cipher and whether names are encrypted (never a key). */
  encryption?: { cipher: string; names: boolean } | null;
  last_sync?: number | null;
  last_error: string | null;
  read_only_reason?: string | null;
  synced_files?: number;
  store_bytes?: number;
  quota_bytes?: number | null;
  quota_warning?: string | null;
  store?: string;
  workspace?: string;
  lease?: ILease | null;
  lease_held?: boolean;
  persist?: IJob | null;
  restore?: { restored: number; conflicts: string[]; errors: string[] } | null;
  /** How changes are noticed, and what the periodic rescan has to cover for. */
  watch?: {
    watcher: 'inotify' | 'watchfiles';
    folders: number | null;
    limited: boolean;
    error: string | null;
    rescan_interval: number;
  };
}

export interface IPendingFile {
  path: string;
  size: number;
  state: 'waiting' | 'writing' | 'uploading' | 'failing' | 'deleting';
  error: string | null;
  since: number;
  /** Why it waits, where that is no error ("still being written: …"). */
  note?: string | null;
}

export interface IPendingList {
  files: IPendingFile[];
  total: number;
  problems: Array<{ path: string; reason: string; size: number }>;
  problems_total: number;
}

export interface IWorkspaceInfo {
  name: string;
  files: number;
  bytes: number;
  last_write: number | null;
  host: string | null;
  folder: string | null;
  more: boolean;
}

export interface IWorkspaces {
  store: string;
  current: string;
  current_files: number;
  workspaces: IWorkspaceInfo[];
}

export interface ICheckpointKernel {
  kernel_id: string;
  notebook: string | null;
  run: string;
  objects: { [name: string]: string };
  step: number;
  cell_running: boolean;
  writing: boolean;
  pending: { request_id: string | null; requested: number } | null;
  last: {
    step: number;
    time: number;
    bytes: number;
    path: string;
    seconds: number | null;
    synced?: boolean | null;
  } | null;
  last_error: string | null;
  request: { state: string; message: string | null } | null;
}

/** A torch.distributed run (checkpointed through DCP): a live one registered by its ranks, or
 * one whose checkpoints the work directory holds. */
export interface IDistributedRun {
  run_id: string | null;
  run: string;
  live: boolean;
  world_size?: number | null;
  mesh?: { parallelism?: string; shape?: number[]; wrapper?: string } | null;
  pending?: { request_id: string | null } | null;
  writing?: boolean;
  last_error?: string | null;
  leader_registered?: boolean;
  ranks?: {
    rank: number;
    host: string | null;
    phase: string | null;
    step: number | null;
    last_error: string | null;
    terminating: boolean | null;
  }[];
  checkpoints: {
    step: number;
    time: number;
    bytes: number;
    world_size: number;
    bytes_per_rank: number[];
    path: string;
    synced?: boolean | null;
  }[];
  resumable?: { message: string; fits: boolean | null } | null;
  request?: { state: string; message: string | null } | null;
}

export interface ICheckpointRequest {
  kernel_id?: string;
  run_id?: string;
  request_id?: string;
  state: 'sent' | 'accepted' | 'done' | 'error';
  step?: number;
  message?: string | null;
}

export interface IRuntimeNotice {
  id: number;
  level: 'info' | 'warning' | 'error';
  message: string;
  time: number;
  job_id: string | null;
}

export interface IGitStatus {
  enabled: boolean;
  repository?: string | null;
  branch?: string | null;
  last_commit?: { sha: string; message: string; time: number } | null;
  uncommitted?: number;
  too_large?: string[];
  remote?: string | null;
  push?: { state: string; time: number | null; ahead?: number; behind?: number } | null;
  last_persist?: number | null;
  last_error?: string | null;
  /** Files left out of commits because their attributes name a filter driver. */
  filtered?: number | null;
  /** Why no git command runs now (a restore is writing the work directory). */
  waiting?: string | null;
}

/** Where the server runs: JupyterHub, Kubernetes (KubeSpawner), the grace it gets, keep-alive. */
export interface IPlatform {
  jupyterhub: {
    user: string;
    server_name: string;
    api_url: string;
    started: number | null;
    last_activity: number | null;
    activity_of: 'server' | 'user' | null;
    read_at: number | null;
    error: string | null;
    max_age: number | null;
    cull_timeout: number | null;
  } | null;
  kubernetes: boolean;
  kubespawner: boolean;
  grace: {
    seconds: number | null;
    source: string | null;
    emergency_seconds: number | null;
    emergency_measured_by: string | null;
    budget: number;
    warning: string | null;
  };
  keep_alive: {
    enabled: boolean;
    active: boolean;
    reason: string | null;
    last_sent: number | null;
    error: string | null;
  };
}

export interface IRuntimeState {
  now: number;
  start: number;
  elapsed: number;
  deadline: number | null;
  source: string | null;
  remaining: number | null;
  sources: Array<{ at: number; source: string; detail: string | null }>;
  idle_seconds: number | null;
  idle_deadline: number | null;
  preemption: { cloud: string; detail: string; noticed: number; deadline: number | null } | null;
  /** The clouds whose metadata servers are polled for notices, and why a poll failed. */
  preemption_watch?: { watching: string[]; errors: { [cloud: string]: string } };
  next_persist: number | null;
  persist_lead_time: number;
  grace_period: number;
  errors: string[];
  notices: IRuntimeNotice[];
  auto_persist: IJob | null;
  emergency: { reason: string; state: string; pending_count?: number; errors?: string[] } | null;
  release: {
    job_id: string;
    state: 'persisting' | 'kept' | 'releasing';
    error: string | null;
  } | null;
  git: IGitStatus | null;
  platform?: IPlatform;
}

/** A package a restore would fetch and build from a VCS commit or a URL. */
export interface IEnvSource {
  name: string;
  version: string;
  kind: string;
  source: string;
}

export interface IEnvState {
  state: 'capturing' | 'no-snapshot' | 'matches' | 'differs' | 'error';
  python: string;
  captured_at: number | null;
  capturing: boolean;
  current: {
    hash: string;
    packages: number;
    python: { version: string; implementation: string } | null;
    torch: { version: string | null; cuda: string | null } | null;
  } | null;
  latest: { id: string; captured_at: number; hash: string; packages: number } | null;
  diff: {
    added: Array<{ name: string; version: string }>;
    removed: Array<{ name: string; version: string }>;
    /** from_version: in the snapshot; to_version: installed here now. */
    changed: Array<{ name: string; from_version: string; to_version: string }>;
    same: number;
    matches: boolean;
  } | null;
  compatibility: Array<{ level: 'ok' | 'info' | 'warn' | 'error'; message: string }>;
  /** What restoring the latest snapshot would fetch and build (only with allow_sources). */
  sources: IEnvSource[];
  snapshots: Array<{ id: string; stamp: string; hash12: string }>;
  error: string | null;
  snapshot_job: IJob | null;
  restore_job: IJob | null;
}

/** One anomaly episode of a training run; notify once per `id`. */
export interface ITrainingAnomaly {
  id: string;
  kind:
    | 'nan-loss'
    | 'loss-spike'
    | 'divergence'
    | 'stall'
    | 'input-bound'
    | 'gpu-memory'
    | 'eta-past-deadline';
  run: string;
  level: 'error' | 'warning';
  message: string;
  advice: string;
  since: number;
  step: number | null;
  kernel_id: string | null;
}

/** Whether a run finishes before the runtime's deadline. */
export interface ITrainingVerdict {
  state: 'finishes' | 'tight' | 'short' | 'done' | 'unknown' | 'no-total' | 'no-deadline';
  eta: number | null;
  finish_at: number | null;
  deadline: number | null;
  source: string | null;
  margin: number | null;
  short_by: number | null;
  steps_by_deadline: number | null;
  persist_at: number | null;
  persist_step: number | null;
  message: string;
}

export interface ITrainingRun {
  run: string;
  kernel_id: string | null;
  notebook: string | null;
  live: boolean;
  state: 'running' | 'paused' | 'stalled' | 'done' | 'stopped';
  step: number | null;
  done_steps: number | null;
  total: number | null;
  rate: number | null;
  elapsed: number | null;
  last_time: number | null;
  eta: number | null;
  finish_at: number | null;
  verdict: ITrainingVerdict | null;
  values: { [name: string]: number };
  scalars: string[];
  /** [step, loss or null] pairs, oldest first. */
  sparkline: Array<[number, number | null]>;
  anomalies: ITrainingAnomaly[];
  checkpoint: { step: number; health: string | null; path: string; time: number | null } | null;
  tensorboard: string | null;
}

/** `GET /gpuws/api/training`. */
export interface ITrainingState {
  now: number;
  deadline: {
    at: number;
    source: string;
    next_persist: number | null;
    persist_lead_time: number;
  } | null;
  runs: ITrainingRun[];
  anomalies: ITrainingAnomaly[];
  errors: string[];
}

/** `GET /gpuws/api/training/history`: [step, time, value or null] per scalar and run; per GPU
 * [time, utilisation %, memory fraction]. */
export interface ITrainingHistory {
  now: number;
  runs: {
    [run: string]: {
      series: { [name: string]: Array<[number, number, number | null]> };
      total: number | null;
      step: number | null;
      live: boolean;
    };
  };
  gpus: Array<{
    index: number;
    name: string;
    points: Array<[number, number | null, number | null]>;
  }>;
  gpu_bucket_seconds: number;
}

/** One attempt of a user's job: when and where it ran, and why it ended. */
export interface IUserJobAttempt {
  number: number;
  started: number;
  ended: number | null;
  host: string;
  returncode: number | null;
  reason: string | null;
  retryable: boolean | null;
  step: number | null;
  /** What it ran on where not what was asked ("relaunched on 1 GPU of the 2 asked: …"). */
  runs_on: string | null;
}

/** A script or a notebook the server runs as a job for the user (`jupyter gpuws run`, `%gpuws
 * run`, "Run as job"): not the server's own long work, which is IJob. */
export interface IUserJob {
  id: string;
  name: string;
  kind: 'command' | 'notebook';
  command: string[];
  notebook: string | null;
  /** The notebook's copy with its outputs ("train.job.ipynb"). */
  output: string | null;
  cwd: string;
  gpus: number | null;
  retries: number;
  state:
    | 'queued'
    | 'running'
    | 'interrupted'
    | 'relaunched'
    | 'retrying'
    | 'finished'
    | 'failed'
    | 'stopped'
    | 'held';
  /** "attempt 2 of 3: CUDA out of memory at step 4,120". */
  reason: string | null;
  attempts: IUserJobAttempt[];
  /** The tracked run the job registered, once it has. */
  run: string | null;
  step: number | null;
  total_steps: number | null;
  eta_seconds: number | null;
  /** The verdict against the runtime's deadline, in words. */
  verdict: string | null;
  log_tail: string[];
  /** What happens on the next runtime, while a relaunch is due; once relaunched, on which
   * environment, where that differed from the snapshot. */
  relaunch: string | null;
  /** A record this runtime cannot vouch for (not signed by this user's secret): it runs only once
   * the user approves it (a restart). */
  needs_approval: boolean;
  created: number;
  updated: number;
}

/** `GET /gpuws/api/jobs`. */
export interface IUserJobs {
  jobs: IUserJob[];
  relaunch: { enabled: boolean; pending: string[] };
  /** Why the jobs' records cannot be read from or written to the store now. */
  error?: string | null;
}

/** What `POST /gpuws/api/jobs` takes: a command or a notebook (relative to the work directory). */
export type UserJobRequest = ({ command: string[] } | { notebook: string }) & {
  name?: string;
  retries?: number;
  gpus?: number;
  cwd?: string;
};

export function listJobs(): Promise<IUserJobs> {
  return requestAPI<IUserJobs>('jobs');
}

export function startJob(request: UserJobRequest): Promise<IUserJob> {
  return requestAPI<IUserJob>('jobs', { method: 'POST', body: JSON.stringify(request) });
}

/** A running job is stopped (checkpoint first) and kept as stopped; any other is forgotten. */
export async function stopJob(id: string): Promise<void> {
  await requestAPI<void>(`jobs/${encodeURIComponent(id)}`, { method: 'DELETE' });
}

/** Run an ended job again, from its newest checkpoint. For a record this runtime cannot vouch
 * for (needs_approval) this is the user's approval: the server signs it as theirs from then on. */
export function restartJob(id: string): Promise<IUserJob> {
  return requestAPI<IUserJob>(`jobs/${encodeURIComponent(id)}/restart`, {
    method: 'POST',
    body: '{}'
  });
}

/** A held job is not relaunched by the next runtime until it is let go. */
export function holdJob(id: string, hold: boolean): Promise<IUserJob> {
  return requestAPI<IUserJob>(`jobs/${encodeURIComponent(id)}/hold`, {
    method: 'POST',
    body: JSON.stringify({ hold })
  });
}

/** The last `lines` lines of a job's output. */
export async function jobLog(id: string, lines: number): Promise<string[]> {
  const answer = await requestAPI<{ lines: string[] }>(
    `jobs/${encodeURIComponent(id)}/log?lines=${lines}`
  );
  return answer.lines;
}
