import React from 'react';

import { ICheckpointKernel } from '../api';
import { CheckpointsModel } from '../checkpoints';
import { formatBytes, shortPath } from '../format';
import { formatAge } from '../sync';
import { checkpointAction } from '../actions';
import { checkpointIcon } from '../icons';
import { WORDS } from '../vocabulary';
import { EmptyState } from './EmptyState';
import { ActionButton } from './Section';

/** Each notebook with a checkpoint agent: what it tracks, its last checkpoint, Checkpoint now. */
export function CheckpointsSection(props: { model: CheckpointsModel }): JSX.Element {
  const { model } = props;
  return (
    <>
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {model.kernels.length === 0 ? (
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
  const now = Date.now() / 1000;
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
          onClick={() => void model.checkpointNow(kernel.kernel_id)}
          testId="gpuws-checkpoint-now"
        />
      </div>
      <div className="jp-gpuws-subtle">tracks {Object.keys(kernel.objects).join(', ') || 'nothing'}</div>
      <div className="jp-gpuws-checkpoint-last" data-testid="gpuws-checkpoint-last">
        {last ? (
          <>
            step {last.step} · {formatAge(now - last.time)} ago · {formatBytes(last.bytes)} ·{' '}
            {last.synced === true ? (
              <span className="jp-gpuws-ok">{WORDS.checkpoint.in_store}</span>
            ) : last.synced === false ? (
              <span className="jp-gpuws-pending">{WORDS.checkpoint.not_in_store}</span>
            ) : (
              <span>{WORDS.checkpoint.local_only}</span>
            )}
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
      {kernel.last_error && <div className="jp-gpuws-message jp-gpuws-error">{kernel.last_error}</div>}
    </div>
  );
}
