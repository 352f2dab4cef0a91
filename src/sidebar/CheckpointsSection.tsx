import React from 'react';

import { ICheckpointKernel, IDistributedRun } from '../api';
import { checkpointAction, checkpointNow } from '../checkpoints/actions';
import { CheckpointsModel } from '../checkpoints/model';
import { checkpointIcon } from '../icons';
import { newestCheckpointText, rankState, runHow, shownRanks } from '../checkpoints/words';
import { shortPath, size, span, WORDS } from '../vocabulary';
import { shown } from '../shown';
import { EmptyState } from './EmptyState';
import { ActionButton } from './Section';
import { liveNow } from '../reach';

/** Each notebook with a checkpoint agent, each job's run and each distributed run (torchrun):
 * what it tracks or is, its last checkpoint, Checkpoint now. */
export function CheckpointsSection(props: { model: CheckpointsModel }): JSX.Element {
  const { model } = props;
  return (
    <>
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {model.kernels.length === 0 && model.runs.length === 0 ? (
        <EmptyState
          text="None tracked"
          title="No notebook tracks training state yet: copy the snippet into your training notebook"
          snippet={TRACKING_SNIPPET}
          docs="checkpoints.md"
          testId="gpuws-checkpoints-empty"
        />
      ) : (
        model.kernels.map(kernel => (
          <KernelCard key={kernel.kernel_id} kernel={kernel} model={model} />
        ))
      )}
      {model.runs.map(run => (
        <RunCard key={run.run_id ?? run.folder ?? run.run} run={run} model={model} />
      ))}
    </>
  );
}

/** What a training notebook adds to be checkpointed and resumed. */
export const TRACKING_SNIPPET = [
  '%load_ext jupyter_gpu_ws',
  'import jupyter_gpu_ws as gpuws',
  'gpuws.track(model=model, optimizer=opt)',
  'start = gpuws.resume()',
  'for i in range(start, steps):',
  '    ...  # one training step',
  '    gpuws.step(i)'
].join('\n');

function KernelCard(props: { kernel: ICheckpointKernel; model: CheckpointsModel }): JSX.Element {
  const { kernel, model } = props;
  const last = kernel.last;
  const now = liveNow();
  const name = kernel.notebook ? shortPath(kernel.notebook) : kernel.run;
  return (
    <div className="jp-gpuws-card" data-testid="gpuws-checkpoint-kernel">
      <div className="jp-gpuws-card-head">
        <div className="jp-gpuws-card-title" title={kernel.notebook ?? kernel.run}>
          {name}
        </div>
        <ActionButton
          action={checkpointAction(kernel, model)}
          icon={checkpointIcon}
          onClick={() => void checkpointNow(model, { kernel_id: kernel.kernel_id })}
          testId="gpuws-checkpoint-now"
        />
      </div>
      <div className="jp-gpuws-subtle">
        tracks {Object.keys(kernel.objects).join(', ') || 'nothing'}
      </div>
      <div className="jp-gpuws-checkpoint-last" data-testid="gpuws-checkpoint-last">
        {last ? (
          <>
            step {last.step} · {span(now - last.time)} ago · {size(last.bytes)} ·{' '}
            <StoreState synced={last.synced} />
          </>
        ) : (
          WORDS.checkpoint.none
        )}
      </div>
      {kernel.pending && (
        <div className="jp-gpuws-subtle" data-testid="gpuws-checkpoint-pending">
          {kernel.cell_running ? 'requested: saving at the next step' : 'requested'}
        </div>
      )}
      {kernel.last_error && (
        <div className="jp-gpuws-message jp-gpuws-error">{kernel.last_error}</div>
      )}
    </div>
  );
}

/** Whether a checkpoint is in the store yet, coloured: in the store, not yet, or local only (no
 * store to carry it). */
function StoreState(props: { synced: boolean | null | undefined }): JSX.Element {
  const words = WORDS.checkpoint;
  return props.synced === true ? (
    <span className="jp-gpuws-ok">{words.in_store}</span>
  ) : props.synced === false ? (
    <span className="jp-gpuws-pending">{words.not_in_store}</span>
  ) : (
    <span>{words.local_only}</span>
  );
}

/** A run of processes of its own as one run: a job's one process (its job, whether it runs,
 * its newest checkpoint), or a distributed run (its ranks and their part of the checkpoint, the
 * checkpoints with their size on each rank, and whether the newest loads on this machine). */
function RunCard(props: { run: IDistributedRun; model: CheckpointsModel }): JSX.Element {
  const { run, model } = props;
  const runId = run.run_id;
  const busy = !!run.writing || !!run.pending || (runId !== null && model.requested.has(runId));
  const ranks = shownRanks(run);
  const newest = newestCheckpointText(run, liveNow());
  return (
    <div className="jp-gpuws-card" data-testid="gpuws-checkpoint-run">
      <div className="jp-gpuws-card-title" title={shown(run.run)}>
        {shown(run.run)}{' '}
        <span className="jp-gpuws-subtle" data-testid="gpuws-checkpoint-run-how">
          {runHow(run)}
        </span>
      </div>
      {ranks.length > 0 && (
        <div className="jp-gpuws-subtle jp-gpuws-ranks" data-testid="gpuws-checkpoint-ranks">
          {ranks.map(rank => (
            <span key={rank.rank} title={rank.last_error ?? rank.host ?? ''}>
              rank {rank.rank}: {rankState(rank)}
            </span>
          ))}
        </div>
      )}
      <div className="jp-gpuws-checkpoint-last" data-testid="gpuws-checkpoint-last">
        {newest ? (
          <>
            {newest} · <StoreState synced={run.checkpoints[0].synced} />
          </>
        ) : (
          WORDS.checkpoint.none
        )}
      </div>
      {run.resumable && (
        <div
          className={`jp-gpuws-subtle${run.resumable.fits === false ? ' jp-gpuws-pending' : ''}`}
          data-testid="gpuws-checkpoint-resumable"
        >
          {run.resumable.message}
        </div>
      )}
      {run.last_error && <div className="jp-gpuws-message jp-gpuws-error">{run.last_error}</div>}
      {run.live && runId !== null && run.leader_registered && (
        <button
          className="jp-mod-styled jp-gpuws-button"
          data-testid="gpuws-checkpoint-run-now"
          disabled={busy}
          onClick={() => void checkpointNow(model, { run_id: runId })}
        >
          {busy ? 'Checkpointing…' : 'Checkpoint now'}
        </button>
      )}
    </div>
  );
}
