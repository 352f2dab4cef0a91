// Checkpoint now, for a notebook or a distributed run, with its failure in a notification; and
// whether it can run now, or why not.
import { Notification } from '@jupyterlab/apputils';

import { ICheckpointKernel } from '../api';
import { can, cannot, IAction } from '../action';
import { WORDS } from '../vocabulary';
import { CheckpointsModel, CheckpointTarget } from './model';

export function checkpointAction(kernel: ICheckpointKernel, model: CheckpointsModel): IAction {
  if (kernel.writing) {
    return cannot('A checkpoint of this notebook is being written');
  }
  if (kernel.pending || model.requested.has(kernel.kernel_id)) {
    return cannot(
      kernel.cell_running ? 'Requested: it is saved at the next step' : 'Requested: saving…'
    );
  }
  return can(`${WORDS.actions.checkpoint}: save what this notebook tracks at its next safe step`);
}

/** Checkpoint now; a refusal or a failure shows in a notification with its reason. */
export async function checkpointNow(
  model: CheckpointsModel,
  target: CheckpointTarget
): Promise<void> {
  try {
    const request = await model.checkpoint(target);
    if (request.state === 'error') {
      Notification.error(`Checkpoint failed: ${request.message}`, { autoClose: false });
    }
  } catch (error) {
    Notification.error(`Checkpoint failed: ${(error as Error).message}`, { autoClose: false });
  }
}
