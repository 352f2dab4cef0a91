// "Run as job" for a notebook: the server runs it without this page; the notification names the
// job and leads to the panel, or says why the server refused.
import { Notification } from '@jupyterlab/apputils';

import { IUserJob } from '../api';
import { shortPath } from '../vocabulary';
import { JobsModel } from './model';

/** The job, or null when the server refused (the reason in a notification). */
export async function runNotebook(
  jobs: JobsModel,
  path: string,
  openPanel: () => void
): Promise<IUserJob | null> {
  let job: IUserJob;
  try {
    job = await jobs.runNotebook(path);
  } catch (error) {
    Notification.error(`Cannot run ${shortPath(path)} as a job: ${(error as Error).message}`, {
      autoClose: false
    });
    return null;
  }
  const outputs = job.output ? `, its outputs written into ${shortPath(job.output)}` : '';
  Notification.success(
    `Job "${job.name}" started: it runs on the server, without this page${outputs}`,
    {
      autoClose: 8000,
      actions: [{ label: 'Show in GPU Workspace', callback: openPanel }]
    }
  );
  return job;
}
