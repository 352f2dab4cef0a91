// The one typed client of the jupyter_gpu_ws server API: REST requests and the metrics stream.
// The shapes are docs/openapi.yaml's, through the types generated from it (api.generated.ts);
// the names below are those the rest of src/ uses.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { components, paths } from './api.generated';
import { serverReach } from './reach';

/** What a proxy answers for a server behind it that does not. */
const GATEWAY_FAILURES = new Set([502, 503, 504]);

type Schemas = components['schemas'];

export type IGpuProcess = Schemas['Process'];
export type IMigDevice = Schemas['Mig'];
export type IGpu = Schemas['Gpu'];
export type IDisk = Schemas['Disk'];
export type ISystem = Schemas['System'];
export type IAlert = Schemas['Alert'];
export type ISample = Schemas['Sample'];
/** `GET /gpuws/api/metrics?since=…`: the latest sample and the history after `since`. */
export type IMetricsWithHistory = Schemas['MetricsWithHistory'];

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
  let text: string;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
    text = await response.text();
  } catch (error) {
    serverReach.lost();
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  let data: unknown = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // not JSON: keep the text for the error message
    }
  }
  if (GATEWAY_FAILURES.has(response.status) && typeof data !== 'object') {
    // A proxy in front of the server (JupyterHub's) answering for a server that does not.
    serverReach.lost();
    throw new ServerConnection.NetworkError(
      new TypeError(`The server is not answering (${response.status} from the proxy before it)`)
    );
  }
  serverReach.answered();
  if (!response.ok) {
    const said =
      typeof data === 'object' && data !== null ? (data as { message?: unknown }).message : null;
    const message = (typeof said === 'string' && said) || response.statusText || String(data);
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
export type ISaveDocumentsRequest = Schemas['SaveDocumentsRequest'];
/** A document that could not be saved, and why. */
export type IDocumentFailure = Schemas['DocumentFailure'];
/** Page → server: the answer to a save request. */
export type IDocumentsSaved = Schemas['DocumentsSaved'];
/** `result.documents` of a persist job: what the connected pages saved before it. */
export type IDocumentsReport = Schemas['DocumentsReport'];

export type ILease = Schemas['Lease'];
export type IJobProgress = Schemas['Progress'];
/** The server's own long work (persist, restore, environment snapshot and restore). */
export type IJob = Schemas['Job'];
export type IPersistSummary = Schemas['PersistSummary'];
export type ISyncStatus = Schemas['SyncStatus'];
export type IPendingFile = Schemas['PendingFile'];
export type IPendingList = Schemas['PendingList'];
export type IWorkspaceInfo = Schemas['WorkspaceInfo'];
export type IWorkspaces = Schemas['Workspaces'];
export type ICheckpointKernel = Schemas['CheckpointKernel'];
export type IDistributedRun = Schemas['DistributedRun'];
export type ICheckpointRequest = Schemas['CheckpointRequest'];
export type ICheckpointKernels = Schemas['CheckpointKernels'];
export type ICheckpointRequests = Schemas['CheckpointRequests'];
export type IRuntimeNotice = Schemas['RuntimeNotice'];
export type IGitStatus = Schemas['GitStatus'];
export type IPlatform = Schemas['Platform'];
export type IRuntimeState = Schemas['Runtime'];
export type IEnvSource = Schemas['EnvSource'];
export type IEnvState = Schemas['EnvState'];
export type ITrainingAnomaly = Schemas['TrainingAnomaly'];
export type ITrainingVerdict = Schemas['TrainingVerdict'];
export type ITrainingRun = Schemas['TrainingRun'];
export type ITrainingState = Schemas['Training'];
/** `GET /gpuws/api/training/history`. Its points are tuples whose positions OpenAPI 3.0 cannot
 * type one by one (every position is `number | null` there): the step and the time are never
 * null, which is said here. */
export type ITrainingHistory = Omit<History, 'runs' | 'gpus'> & {
  runs: {
    [run: string]: Omit<History['runs'][string], 'series'> & {
      /** [step, time, value or null] per scalar. */
      series: { [name: string]: Array<[number, number, number | null]> };
    };
  };
  /** [time, utilisation %, memory fraction] per GPU. */
  gpus: Array<
    Omit<History['gpus'][number], 'points'> & {
      points: Array<[number, number | null, number | null]>;
    }
  >;
};
type History = Schemas['TrainingHistory'];
export type IUserJobAttempt = Schemas['UserJobAttempt'];
/** A script or a notebook the server runs as a job for the user (`jupyter gpuws run`, `%gpuws
 * run`, "Run as job"): not the server's own long work, which is IJob. */
export type IUserJob = Schemas['UserJob'];
/** What restarting a job that waits for approval runs, as the store's record says it. */
export type IUserJobApproval = Schemas['UserJobApproval'];
export type IUserJobs = Schemas['UserJobs'];
/** What `POST /gpuws/api/jobs` takes: a command or a notebook (relative to the work directory). */
export type UserJobRequest = Schemas['UserJobRequest'];
/** `GET /gpuws/api/jobs/{id}/log`. */
type JobLog =
  paths['/gpuws/api/jobs/{id}/log']['get']['responses'][200]['content']['application/json'];

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

/** A job run elsewhere (a cluster's pod from `run --export k8s`), as its area in the store says
 * it: anyone with access to the store writes there, so every text is shown escaped. */
export type IElsewhereJob = Schemas['ElsewhereJob'];
/** What bringing a job run elsewhere home did, file by file. */
export type IBringHome = Schemas['BringHome'];

/** A job run elsewhere's outputs and checkpoints into the work directory; a file changed here
 * since the job began is kept, the job's version put beside it. */
export function bringHome(id: string): Promise<IBringHome> {
  return requestAPI<IBringHome>(`jobs/elsewhere/${encodeURIComponent(id)}/bring-home`, {
    method: 'POST',
    body: '{}'
  });
}

/** The last `lines` lines of a job's output. */
export async function jobLog(id: string, lines: number): Promise<string[]> {
  const answer = await requestAPI<JobLog>(`jobs/${encodeURIComponent(id)}/log?lines=${lines}`);
  return answer.lines;
}
