import React from 'react';

import { IUserJob } from '../api';
import { ApprovalDetails, approveJob, showFullLog } from '../jobs/actions';
import { JobAction, jobActions, JobsModel, LOG_LINES } from '../jobs/model';
import {
  commandText,
  jobEtaText,
  jobRunText,
  jobStateWord,
  jobStepText,
  jobTone,
  jobWhat,
  relaunchText
} from '../jobs/words';
import { shown } from '../shown';
import { Bar } from './Bar';

/**
 * The panel's Jobs section: one row per job the server runs for the user (its name, its state as
 * a coloured word, why, step / total with ETA and the verdict, the last lines of its log) with
 * what can be done to it now; before a relaunch, what will be relaunched and Hold; for a record
 * that waits for approval, what approving it runs. A job's texts come from the store: escaped.
 */
export function JobsSection(props: { model: JobsModel }): JSX.Element {
  const { model } = props;
  const pending = model.pending;
  return (
    <div data-testid="gpuws-jobs">
      {model.error && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-jobs-error">
          {model.error}
        </div>
      )}
      {model.actionError && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-jobs-action-error">
          {model.actionError}
        </div>
      )}
      {model.state?.error && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-jobs-store-error">
          {shown(model.state.error)}
        </div>
      )}
      {(model.state?.bad_records ?? []).map(bad => (
        <div
          key={bad.file}
          className="jp-gpuws-message jp-gpuws-error"
          data-testid="gpuws-jobs-bad-record"
        >
          {`Job record ${shown(bad.file)} is not used: ${shown(bad.reason)}`}
        </div>
      ))}
      {model.jobs.map(job => (
        <JobRow key={job.id} job={job} model={model} due={pending.includes(job.id)} />
      ))}
    </div>
  );
}

/** The panel's existing colours for a state: green, amber, red, quiet. */
const TONE_CLASSES = {
  ok: 'jp-gpuws-ok',
  pending: 'jp-gpuws-pending',
  error: 'jp-gpuws-tone-error',
  none: 'jp-gpuws-job-state-quiet'
};

const BUTTON_WORDS: { [action in JobAction]: [string, string] } = {
  stop: ['Stop', 'Stop the job: it checkpoints first, and stays listed as stopped'],
  restart: ['Restart', 'Run the job again from its newest checkpoint'],
  hold: ['Hold', 'Do not relaunch this job by itself; it waits until you let it go'],
  release: ["Don't hold", 'Let the job be relaunched by itself again'],
  approve: [
    'Approve…',
    'This runtime cannot vouch for this job (it was not recorded here by you): see what it runs, then run it from its newest checkpoint'
  ]
};

function JobRow(props: { job: IUserJob; model: JobsModel; due: boolean }): JSX.Element {
  const { job, model, due } = props;
  const steps = jobStepText(job);
  const share = job.step !== null && job.total_steps ? (100 * job.step) / job.total_steps : null;
  const lines = job.log_tail.slice(-LOG_LINES);
  const logOpen = !model.foldedLogs.has(job.id);
  const busy = model.busy.has(job.id);
  return (
    <div
      className={`jp-gpuws-card jp-gpuws-job jp-gpuws-job-${job.state}`}
      data-testid="gpuws-job"
      data-job={job.id}
    >
      <div className="jp-gpuws-card-head">
        <div
          className="jp-gpuws-card-title"
          title={job.notebook ? shown(job.notebook) : commandText(job.command)}
        >
          {shown(job.name)}
        </div>
        <span
          className={`jp-gpuws-job-state ${TONE_CLASSES[jobTone(job)]}`}
          data-testid="gpuws-job-state"
        >
          {jobStateWord(job)}
        </span>
      </div>
      {job.run && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-job-run">
          {jobRunText(job)}
        </div>
      )}
      {job.reason && (
        <div className="jp-gpuws-line" data-testid="gpuws-job-reason">
          {shown(job.reason)}
        </div>
      )}
      {job.approval && <ApprovalDetails approval={job.approval} />}
      {due ? (
        <div className="jp-gpuws-message jp-gpuws-info" data-testid="gpuws-job-relaunch">
          {relaunchText(job)}
          {job.relaunch && <div className="jp-gpuws-subtle">{shown(job.relaunch)}</div>}
        </div>
      ) : (
        job.relaunch && (
          <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-job-relaunch-note">
            {shown(job.relaunch)}
          </div>
        )
      )}
      {steps && (
        <Bar label={steps} value={share} text={jobEtaText(job) ?? ''} testId="gpuws-job-progress" />
      )}
      {job.verdict && (
        <div className="jp-gpuws-verdict jp-gpuws-subtle" data-testid="gpuws-job-verdict">
          {shown(job.verdict)}
        </div>
      )}
      {lines.length > 0 && (
        <>
          <button
            className="jp-gpuws-link"
            aria-expanded={logOpen}
            data-testid="gpuws-job-log-toggle"
            onClick={() => model.toggleLog(job.id)}
          >
            {logOpen
              ? 'Hide the log'
              : `Show the last ${lines.length === 1 ? 'line' : `${lines.length} lines`} of the log`}
          </button>
          {logOpen && (
            <pre className="jp-gpuws-job-log" data-testid="gpuws-job-log">
              {lines.map(shown).join('\n')}
            </pre>
          )}
        </>
      )}
      <div className="jp-gpuws-job-actions">
        {jobActions(job, due ? [job.id] : []).map(action => (
          <button
            key={action}
            className="jp-mod-styled jp-gpuws-button"
            title={BUTTON_WORDS[action][1]}
            disabled={busy}
            data-testid={`gpuws-job-${action}`}
            onClick={() =>
              void (action === 'approve' ? approveJob(model, job) : model.act(job, action))
            }
          >
            {BUTTON_WORDS[action][0]}
          </button>
        ))}
        <button
          className="jp-gpuws-link"
          title={`The output of ${jobWhat(job)}, as far as the server keeps it`}
          data-testid="gpuws-job-full-log"
          onClick={() => void showFullLog(job)}
        >
          Show full log
        </button>
      </div>
    </div>
  );
}
