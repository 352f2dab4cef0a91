import React from 'react';

import { IElsewhereJob, IUserJob } from '../api';
import { ApprovalDetails, approveJob, showFullLog } from '../jobs/actions';
import { JobAction, jobActions, JobsModel, LOG_LINES } from '../jobs/model';
import {
  commandText,
  elsewhereLine,
  elsewhereStateWord,
  elsewhereTone,
  homecomingLines,
  jobEtaText,
  jobRunText,
  jobStateWord,
  jobStepText,
  jobTone,
  jobWhat,
  relaunchText
} from '../jobs/words';
import { shown } from '../shown';
import { STORE_FAULT } from '../sync/words';
import { Bar } from './Bar';
import { liveNow } from '../reach';

/**
 * The panel's Jobs section: one row per job the server runs for the user (its name, its state as
 * a coloured word, why, step / total with ETA and the verdict, the last lines of its log) with
 * what can be done to it now; before a relaunch, what will be relaunched and Hold; for a record
 * that waits for approval, what approving it runs. Then the jobs run elsewhere (a cluster's pod)
 * that the server found in the store, each with Bring home. A job's texts come from the store:
 * escaped.
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
          {model.state.store_fault ? STORE_FAULT : shown(model.state.error)}
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
      {model.homecoming && <Homecoming model={model} />}
      {model.elsewhere.map(job => (
        <ElsewhereRow key={job.id} job={job} model={model} />
      ))}
      {(model.state?.elsewhere?.problems ?? []).map(problem => (
        <div
          key={problem.id}
          className="jp-gpuws-message jp-gpuws-error"
          data-testid="gpuws-elsewhere-problem"
        >
          {`The job run elsewhere ${shown(problem.id)} is not listed: ${shown(problem.reason)}`}
        </div>
      ))}
    </div>
  );
}

/** What the last Bring home did: what came, what stayed the user's and where the job's is. */
function Homecoming(props: { model: JobsModel }): JSX.Element | null {
  const { homecoming } = props.model;
  if (!homecoming) {
    return null;
  }
  const [headline, ...rest] = homecomingLines(homecoming.answer);
  return (
    <div className="jp-gpuws-message jp-gpuws-info" data-testid="gpuws-homecoming">
      {`${shown(homecoming.job.name)} brought home: ${headline}`}
      {rest.length > 0 && (
        <ul className="jp-gpuws-job-changed">
          {rest.map(line => (
            <li key={line} data-testid="gpuws-homecoming-line">
              {line}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** A job run elsewhere: its name and state, where it runs, its step and outputs, Bring home. */
function ElsewhereRow(props: { job: IElsewhereJob; model: JobsModel }): JSX.Element {
  const { job, model } = props;
  const outputs = job.outputs.map(o => shown(o.path));
  const more = job.outputs_count - job.outputs.length;
  return (
    <div
      className="jp-gpuws-card jp-gpuws-job jp-gpuws-job-elsewhere"
      data-testid="gpuws-elsewhere-job"
      data-job={job.id}
    >
      <div className="jp-gpuws-card-head">
        <div className="jp-gpuws-card-title" title={commandText(job.command)}>
          {shown(job.name)}
        </div>
        <span
          className={`jp-gpuws-job-state ${TONE_CLASSES[elsewhereTone(job)]}`}
          data-testid="gpuws-elsewhere-state"
        >
          {elsewhereStateWord(job)}
        </span>
      </div>
      <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-elsewhere-line">
        {`elsewhere ${elsewhereLine(job, liveNow())}`}
      </div>
      {job.error && (
        <div className="jp-gpuws-line" data-testid="gpuws-elsewhere-error">
          {shown(job.error)}
        </div>
      )}
      {outputs.length > 0 && (
        <div className="jp-gpuws-line" data-testid="gpuws-elsewhere-outputs">
          {`Outputs: ${outputs.join(', ')}${more > 0 ? ` and ${more} more` : ''}`}
        </div>
      )}
      <div className="jp-gpuws-job-actions">
        <button
          className="jp-mod-styled jp-gpuws-button"
          title="Copy its outputs and checkpoints into the work directory: a file changed here since the job began stays, the job's version lands beside it"
          disabled={model.busy.has(job.id)}
          data-testid="gpuws-elsewhere-bring-home"
          onClick={() => void model.bringHome(job)}
        >
          Bring home
        </button>
      </div>
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
