// "Run as job" for a notebook: the server runs it without this page; the notification names the
// job and leads to the panel, or says why the server refused. And a job's whole log in a dialog.
import React from 'react';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';

import { IUserJob, jobLog } from '../api';
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

/** As many lines as the server keeps of a job's output, read once when opened. */
const FULL_LOG_LINES = 5000;

/** The job's whole kept log in a dialog, read-only, scrolled to its end; or why it cannot be read. */
export async function showFullLog(job: IUserJob): Promise<void> {
  let lines: string[];
  let error: string | null = null;
  try {
    lines = await jobLog(job.id, FULL_LOG_LINES);
  } catch (reason) {
    lines = [];
    error = `The log cannot be read: ${(reason as Error).message}`;
  }
  const body = ReactWidget.create(<FullLog lines={lines} error={error} />);
  body.addClass('jp-gpuws-job-log-dialog');
  await showDialog({
    title: `Log of ${job.name}`,
    body,
    buttons: [Dialog.okButton({ label: 'Close' })]
  });
}

function FullLog(props: { lines: string[]; error: string | null }): JSX.Element {
  const end = React.useRef<HTMLPreElement>(null);
  React.useEffect(() => {
    end.current?.scrollTo(0, end.current.scrollHeight);
  }, []);
  if (props.error) {
    return (
      <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-job-full-log-error">
        {props.error}
      </div>
    );
  }
  return (
    <pre
      ref={end}
      className="jp-gpuws-job-log jp-gpuws-job-log-full"
      data-testid="gpuws-job-full-log-text"
    >
      {props.lines.length ? props.lines.join('\n') : '(no output yet)'}
    </pre>
  );
}
