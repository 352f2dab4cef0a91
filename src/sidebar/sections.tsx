// The panel's own sections, as descriptors: what each shows, its actions, its place. Ranks leave
// room between them for sections added later (a Training section at the top, say).
import React from 'react';
import { historyIcon, launchIcon, stopIcon } from '@jupyterlab/ui-components';

import { CheckpointsModel } from '../checkpoints/model';
import {
  restore,
  restoreEnvironmentAction,
  snapshot,
  snapshotAction
} from '../environment/actions';
import { EnvironmentModel } from '../environment/model';
import { snapshotIcon } from '../icons';
import { jobActive, JobsModel } from '../jobs/model';
import { jobsSummary } from '../jobs/words';
import { MetricsModel } from '../metrics/model';
import { gpuSummary, systemSummary } from '../metrics/words';
import { RuntimeModel } from '../runtime/model';
import { runtimeWord } from '../runtime/words';
import { SyncModel } from '../sync/model';
import { CANCELLING, syncWord } from '../sync/words';
import { TrainingModel } from '../training/model';
import { stepText } from '../training/words';
import { count, WORDS } from '../vocabulary';
import { CheckpointsSection } from './CheckpointsSection';
import { EnvironmentSection } from './EnvironmentSection';
import { GpuSection } from './GpuSection';
import { GitSection, RuntimeSection } from './RuntimeSection';
import { ActionButton, IPanelSection } from './Section';
import { SyncSection } from './SyncSection';
import { SystemSection } from './SystemSection';
import { TrainingSection } from './TrainingSection';
import { JobsSection } from './JobsSection';

export interface IPanelModels {
  metrics: MetricsModel;
  sync: SyncModel;
  checkpoints: CheckpointsModel;
  runtime: RuntimeModel;
  environment: EnvironmentModel;
}

export interface IPanelOptions {
  sparklineSeconds: number;
}

/** Where the built-in sections go; a later section picks a rank between them. */
export const RANKS = {
  training: 5,
  jobs: 7,
  gpus: 10,
  runtime: 20,
  sync: 30,
  checkpoints: 40,
  trainingWhenNone: 45,
  jobsWhenIdle: 47,
  environment: 50,
  git: 60,
  gpusWhenNone: 80,
  system: 90
};

export function defaultSections(m: IPanelModels, options: () => IPanelOptions): IPanelSection[] {
  const hasGpus = () => (m.metrics.latest?.gpus.length ?? 0) > 0;
  return [
    {
      // Right below the header when there are GPUs: they are what the user pays for.
      id: 'gpus',
      title: 'GPUs',
      rank: () => (hasGpus() ? RANKS.gpus : RANKS.gpusWhenNone),
      changed: [m.metrics.changed],
      summary: () => gpuSummary(m.metrics.latest).text,
      render: () => <GpuMonitor metrics={m.metrics} seconds={options().sparklineSeconds} />
    },
    {
      id: 'runtime',
      title: 'Runtime',
      rank: RANKS.runtime,
      changed: [m.runtime.changed],
      summary: () => runtimeWord(m.runtime).text || WORDS.runtime.no_end,
      render: () => <RuntimeSection model={m.runtime} />
    },
    {
      id: 'sync',
      title: 'Sync',
      rank: RANKS.sync,
      changed: [m.sync.changed],
      summary: () => syncWord(m.sync).text,
      toolbar: () => {
        const job = m.sync.currentPersist;
        return job?.state === 'running' ? (
          <ActionButton
            action={
              job.cancelling
                ? { enabled: false, tooltip: CANCELLING }
                : { enabled: true, tooltip: 'Cancel the persist: what is uploaded stays uploaded' }
            }
            icon={stopIcon}
            onClick={() => void m.sync.cancel(job.id)}
            testId="gpuws-persist-cancel"
          />
        ) : null;
      },
      render: () => <SyncSection model={m.sync} />
    },
    {
      id: 'checkpoints',
      title: 'Checkpoints',
      rank: RANKS.checkpoints,
      changed: [m.checkpoints.changed],
      summary: () =>
        m.checkpoints.kernels.length ? count(m.checkpoints.kernels.length, 'notebook') : 'none',
      render: () => <CheckpointsSection model={m.checkpoints} />
    },
    {
      id: 'environment',
      title: 'Environment',
      rank: RANKS.environment,
      changed: [m.environment.changed],
      summary: () => environmentSummary(m.environment),
      toolbar: () => (
        <>
          {m.environment.busy && (
            <ActionButton
              action={{
                enabled: true,
                tooltip: 'Cancel: stop between packages; what is installed stays'
              }}
              icon={stopIcon}
              onClick={() => void m.environment.cancel()}
              testId="gpuws-env-cancel"
            />
          )}
          <ActionButton
            action={snapshotAction(m.environment)}
            icon={snapshotIcon}
            onClick={() => void snapshot(m.environment)}
            testId="gpuws-env-snapshot"
          />
          <ActionButton
            action={restoreEnvironmentAction(m.environment)}
            icon={historyIcon}
            onClick={() => void restore(m.environment)}
            testId="gpuws-env-restore"
          />
        </>
      ),
      render: () => <EnvironmentSection model={m.environment} />
    },
    {
      id: 'git',
      title: 'Git',
      rank: RANKS.git,
      changed: [m.runtime.changed],
      visible: () => !!m.runtime.state?.git?.enabled,
      render: () => (m.runtime.state?.git ? <GitSection git={m.runtime.state.git} /> : null)
    },
    {
      id: 'system',
      title: 'System',
      rank: RANKS.system,
      changed: [m.metrics.changed],
      summary: () => systemSummary(m.metrics.latest?.system),
      render: () => (m.metrics.latest ? <SystemSection system={m.metrics.latest.system} /> : null)
    }
  ];
}

/** The folded Environment section's word or two: short enough to fit beside its title and
 * buttons at the panel's usual width (250 px); the section itself says it in full. */
function environmentSummary(environment: EnvironmentModel): string {
  const env = environment.state;
  if (environment.busy) {
    return environment.job?.kind === 'env-restore' ? 'restoring…' : 'capturing…';
  }
  switch (env?.state) {
    case undefined:
    case 'capturing':
      return 'reading…';
    case 'no-snapshot':
      return 'no snapshot';
    case 'matches':
      return 'matches';
    case 'differs':
      return 'differs';
    default:
      return 'unreadable';
  }
}

/** The GPU cards, or why there are none; the first sample's wait, or the connection's fault. */
function GpuMonitor(props: { metrics: MetricsModel; seconds: number }): JSX.Element {
  const { metrics } = props;
  const sample = metrics.latest;
  return (
    <>
      {metrics.error && <div className="jp-gpuws-message jp-gpuws-error">{metrics.error}</div>}
      {sample ? (
        <GpuSection sample={sample} history={metrics.history} sparklineSeconds={props.seconds} />
      ) : (
        !metrics.error && (
          <div className="jp-gpuws-line jp-gpuws-subtle">Waiting for the first sample…</div>
        )
      )}
    </>
  );
}

/** Training in view: at the very top while a run is tracked (will it finish before the runtime
 * ends?), among the others with a one-line hint when none is. */
export function trainingSection(training: TrainingModel, openDashboard: () => void): IPanelSection {
  return {
    id: 'training',
    title: 'Training',
    rank: () => (training.runs.length ? RANKS.training : RANKS.trainingWhenNone),
    changed: [training.changed],
    summary: () => {
      const run = training.runs[0];
      return run ? stepText(run) : 'none';
    },
    toolbar: () => (
      <ActionButton
        action={{
          enabled: true,
          tooltip: 'Open Training and GPUs: the curves of each run and the GPUs over time'
        }}
        icon={launchIcon}
        onClick={openDashboard}
        testId="gpuws-open-dashboard"
      />
    ),
    render: () => <TrainingSection model={training} />
  };
}

/** The user's jobs: right below Training while one runs (here or elsewhere), is due to be
 * relaunched or waits for approval; above Environment once all have ended; absent while there is
 * none. */
export function jobsSection(jobs: JobsModel): IPanelSection {
  return {
    id: 'jobs',
    title: 'Jobs',
    rank: () =>
      jobs.jobs.some(job => jobActive(job, jobs.pending)) ||
      jobs.elsewhere.some(job => job.state !== 'ended')
        ? RANKS.jobs
        : RANKS.jobsWhenIdle,
    changed: [jobs.changed],
    visible: () => jobs.jobs.length > 0 || jobs.pending.length > 0 || jobs.elsewhere.length > 0,
    summary: () => jobsSummary(jobs.jobs, jobs.pending, jobs.elsewhere.length),
    render: () => <JobsSection model={jobs} />
  };
}
