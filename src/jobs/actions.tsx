// "Run as job" for a notebook or a Python script: the server runs it without this page, in a new
// run of its own or, where the user picks one, continuing a run; the notification names the job
// and its run and leads to the panel, or says why the server refused. A job's whole log in a
// dialog.
// And the approval of a record this runtime cannot vouch for: what it runs, asked first.
import React from 'react';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';

import { IUserJob, IUserJobApproval, jobLog } from '../api';
import { shown } from '../shown';
import { shortPath, wholeNumber } from '../vocabulary';
import { IResumableRun, JobsModel } from './model';
import { changedLines, commandText, folderText, jobRunText } from './words';

/** What "Run as job" starts in: a new run of its own (the default), or one to continue. */
const NEW_RUN = '';

/**
 * Where the work directory has runs a job could continue, ask first: a new run (the default: a
 * job never continues another's run unasked) or which run to resume. The run's name ('' for a
 * new one), or null when cancelled.
 */
export async function chooseRun(path: string, runs: IResumableRun[]): Promise<string | null> {
  if (!runs.length) {
    return NEW_RUN;
  }
  const body = new RunChoice(runs);
  const result = await showDialog({
    title: `Run ${shortPath(path)} as a job`,
    body,
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Run' })],
    defaultButton: 1
  });
  return result.button.accept ? (result.value ?? NEW_RUN) : null;
}

/** The dialog's choice of run: a select of "a new run" and each run with its newest step. */
class RunChoice extends ReactWidget {
  private readonly select = React.createRef<HTMLSelectElement>();

  constructor(private readonly runs: IResumableRun[]) {
    super();
    this.addClass('jp-gpuws-run-choice');
  }

  getValue(): string {
    return this.select.current?.value ?? NEW_RUN;
  }

  render(): JSX.Element {
    return (
      <label className="jp-gpuws-line">
        Its checkpoints go to{' '}
        <select
          ref={this.select}
          className="jp-mod-styled"
          defaultValue={NEW_RUN}
          data-testid="gpuws-run-choice"
        >
          <option value={NEW_RUN}>a new run of its own</option>
          {this.runs.map(run => (
            <option key={run.run} value={run.run}>
              {`run ${shown(run.run)}, resumed from step ${wholeNumber(run.step)}`}
            </option>
          ))}
        </select>
      </label>
    );
  }
}

/** The notebook's or script's job, or null when the user cancelled or the server refused (the
 * reason in a notification). */
export async function runAsJob(
  jobs: JobsModel,
  path: string,
  openPanel: () => void
): Promise<IUserJob | null> {
  const resume = await chooseRun(path, await jobs.resumableRuns());
  if (resume === null) {
    return null;
  }
  let job: IUserJob;
  try {
    job = await jobs.runFile(path, resume || null);
  } catch (error) {
    Notification.error(`Cannot run ${shortPath(path)} as a job: ${(error as Error).message}`, {
      autoClose: false
    });
    return null;
  }
  const outputs = job.output ? `, its outputs written into ${shortPath(job.output)}` : '';
  const run = job.run ? ` (${jobRunText(job)})` : '';
  Notification.success(
    `Job "${shown(job.name)}" started${run}: it runs on the server, without this page${outputs}`,
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
    title: `Log of ${shown(job.name)}`,
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
      {props.lines.length ? props.lines.map(shown).join('\n') : '(no output yet)'}
    </pre>
  );
}

/**
 * What approving a job runs, as its record in the store says it: the command, its folder, the
 * notebook, and its code's files changed since the record was signed; with `reason`, why this
 * runtime asks. In the job's card, and in the dialog that Approve opens.
 */
export function ApprovalDetails(props: {
  approval: IUserJobApproval;
  reason?: boolean;
}): JSX.Element {
  const { approval } = props;
  const changed = changedLines(approval);
  return (
    <div className="jp-gpuws-job-approval" data-testid="gpuws-job-approval">
      {props.reason && (
        <div className="jp-gpuws-line" data-testid="gpuws-job-approval-reason">
          Why it asks: {shown(approval.reason)}
        </div>
      )}
      <div className="jp-gpuws-line">Runs</div>
      <pre className="jp-gpuws-job-command" data-testid="gpuws-job-approval-command">
        {commandText(approval.command)}
      </pre>
      <div className="jp-gpuws-line" data-testid="gpuws-job-approval-cwd">
        in {folderText(approval.cwd)}
      </div>
      {approval.notebook && (
        <div className="jp-gpuws-line" data-testid="gpuws-job-approval-notebook">
          notebook {shown(approval.notebook)}
        </div>
      )}
      {changed.length > 0 && (
        <div className="jp-gpuws-line" data-testid="gpuws-job-approval-changed">
          Changed since it was signed:
          <ul className="jp-gpuws-job-changed">
            {changed.map(line => (
              <li key={line}>{line}</li>
            ))}
          </ul>
        </div>
      )}
    </div>
  );
}

/**
 * Approve a job that waits for approval: a dialog shows what it runs, where, why this runtime
 * asks and what changed; only its OK restarts it (Cancel, Escape or Enter run nothing: Cancel is
 * the default button). True when approved.
 */
export async function approveJob(jobs: JobsModel, job: IUserJob): Promise<boolean> {
  if (!job.approval) {
    return false;
  }
  const body = ReactWidget.create(<ApprovalDetails approval={job.approval} reason />);
  body.addClass('jp-gpuws-job-approval-dialog');
  const result = await showDialog({
    title: `Run ${shown(job.name)}?`,
    body,
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: 'Approve and run', displayType: 'warn' })
    ],
    defaultButton: 0
  });
  if (!result.button.accept) {
    return false;
  }
  await jobs.act(job, 'approve');
  return true;
}
