// Persist and release: after the user confirms, the server persists everything and stops;
// followed in a notification to its end (or to why the server keeps running). And whether it
// can run now, or why not.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { IJob } from '../api';
import { can, cannot, IAction } from '../action';
import { WORDS } from '../vocabulary';
import { RuntimeModel } from './model';

export function releaseAction(runtime: RuntimeModel): IAction {
  const state = runtime.state;
  if (!state) {
    return cannot(
      runtime.error ? `Cannot release: ${runtime.error}` : 'Waiting for the runtime to answer…'
    );
  }
  if (state.release && state.release.state !== 'kept') {
    return cannot('Releasing: persisting everything, then the server stops');
  }
  return can(
    `${WORDS.actions.release}: persist everything, then shut the server down so a paid runtime stops`
  );
}

/** Persist, then shut the server down (after the user confirms). */
export async function release(runtime: RuntimeModel): Promise<void> {
  const answer = await showDialog({
    title: 'Persist and release this runtime?',
    body:
      'Everything is checkpointed and uploaded to the store, then the server shuts down so a ' +
      'paid runtime stops. If the persist fails, the server keeps running.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Persist and release' })]
  });
  if (!answer.button.accept) {
    return;
  }
  let job: IJob;
  try {
    job = await runtime.startRelease();
  } catch (error) {
    Notification.error(`Release failed: ${(error as Error).message}`, { autoClose: false });
    return;
  }
  const note = Notification.emit('Persisting before the release…', 'in-progress', {
    autoClose: false
  });
  if ((await runtime.followRelease()) === 'kept') {
    Notification.update({
      id: note,
      type: 'error',
      message: `Not released: the persist failed (${runtime.state?.release?.error}). The server keeps running.`,
      autoClose: false
    });
    return;
  }
  Notification.update({
    id: note,
    type: 'success',
    message: `Released: everything was persisted (job ${job.id}) and the server is stopping. You can close this tab.`,
    autoClose: false
  });
}
