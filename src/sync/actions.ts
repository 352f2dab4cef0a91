// What the user can do to the sync, with its confirmations and notifications: Persist now
// (followed to its end in a notification), Take over, and switching to another workspace; and
// whether each can run now, or why not.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { IJob } from '../api';
import { can, cannot, IAction } from '../action';
import { serverReach } from '../reach';
import { WORDS } from '../vocabulary';
import { SyncModel } from './model';
import { CANCELLING, persistResult, toastText } from './words';

const ACTIONS = WORDS.actions;

export function persistAction(sync: SyncModel): IAction {
  const status = sync.status;
  if (serverReach.since !== null) {
    return cannot('The Jupyter server is not answering: nothing can be persisted until it does');
  }
  if (sync.currentPersist?.state === 'running') {
    return cannot(`${ACTIONS.persisting} (progress in the Sync section)`);
  }
  if (!status) {
    return cannot(sync.error ? `Cannot persist: ${sync.error}` : 'Waiting for the sync to answer…');
  }
  switch (status.state) {
    case 'starting':
      return cannot(
        'The sync is starting (restoring from the store); Persist now is possible once it runs'
      );
    case 'disabled':
      return cannot(
        'Sync is turned off (c.GpuWorkspace.sync_enabled), so there is nowhere to persist to'
      );
    case 'read-only':
      return cannot(
        'Another runtime writes this workspace: this one only reads it (see Sync; Take over is in ⋯)'
      );
    case 'taking-over':
      return cannot("Taken over: this runtime writes once the previous one's lease has run out");
  }
  return can(
    `${ACTIONS.persist}: save every open document, checkpoint tracked notebooks, then upload everything to the store`
  );
}

export function takeOverAction(sync: SyncModel): IAction {
  const status = sync.status;
  if (!status) {
    return cannot('Waiting for the sync to answer…');
  }
  if (!status.can_take_over) {
    return cannot(
      status.state === 'taking-over'
        ? 'Already taken over: this runtime writes once the previous lease has run out'
        : 'Nothing to take over: no other runtime writes this workspace'
    );
  }
  return can(`${ACTIONS.take_over}: this runtime becomes the one that writes the workspace`);
}

/** Persist now: start (or join) the server's persist job and follow it to the end in a
 * notification that ends with the outcome. */
export async function persist(sync: SyncModel): Promise<IJob | null> {
  let job: IJob;
  try {
    job = await sync.startPersist();
  } catch (error) {
    Notification.error(`Persist failed: ${(error as Error).message}`, { autoClose: false });
    return null;
  }
  const note = Notification.emit('Persisting the workspace…', 'in-progress', {
    autoClose: false
  });
  job = await sync.followPersist(job, current => {
    if (current.state === 'running' && current.cancelling) {
      Notification.update({ id: note, message: `${CANCELLING}…` });
    } else if (current.state === 'running' && current.activity) {
      Notification.update({ id: note, message: `${current.activity}…` });
    }
  });
  // The server's one wording of the outcome, as %gpuws persist and jupyter gpuws persist say
  // it: "All saved" only for a store that outlives this machine.
  // A notification shows 140 characters: the short line (or as much of it as fits), and the
  // whole text, with what the store holds and any advice, one click away.
  const summary = persistResult(job);
  const message = toastText(summary.short);
  Notification.update({
    id: note,
    type: summary.level === 'ok' ? 'success' : summary.level,
    message,
    autoClose: summary.level === 'ok' || job.state === 'cancelled' ? 5000 : false,
    actions:
      message === summary.text
        ? []
        : [
            {
              label: 'Details',
              caption: 'The whole outcome of this persist',
              callback: () => {
                void showDialog({
                  title: 'Persist now',
                  body: summary.text,
                  buttons: [Dialog.okButton()]
                });
              }
            }
          ]
  });
  return job;
}

/** Become the writer: from a live holder, or anew for a missing store, only after the user
 * confirms. */
export async function takeOver(sync: SyncModel): Promise<void> {
  const status = sync.status;
  const holder = status?.lease;
  const live = !!holder && !!status?.takeover_at && status.takeover_at > Date.now() / 1000;
  if (status?.store_missing) {
    const answer = await showDialog({
      title: 'Start the store anew here?',
      body:
        `${status.store_down ?? 'The store is missing.'} Only if it is not coming back: this runtime ` +
        'makes the folder again and uploads every file of this work directory into it. If it is on a ' +
        'drive that is not mounted, mount it instead: the sync goes on by itself.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Start anew' })]
    });
    if (!answer.button.accept) {
      return;
    }
  } else if (live && holder) {
    const answer = await showDialog({
      title: 'Take over this workspace?',
      body:
        `${holder.user}@${holder.host} is still writing it. Taking over stops it from writing ` +
        'within seconds; this runtime writes once its time is up, after bringing back what the ' +
        'store holds. Files it changes meanwhile are kept as previous versions.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Take over' })]
    });
    if (!answer.button.accept) {
      return;
    }
  }
  try {
    await sync.takeOver();
    Notification.success('This runtime now writes the workspace: it restores, then syncs.', {
      autoClose: 5000
    });
  } catch (error) {
    Notification.error(`Cannot take over: ${(error as Error).message}`, { autoClose: false });
  }
}

/** Switch this work directory to another workspace of the store (after a confirmation). */
export async function useWorkspace(sync: SyncModel, name: string): Promise<void> {
  const answer = await showDialog({
    title: `Use the workspace ${name}?`,
    body:
      `This folder will be mirrored to ${name} from now on (remembered on this machine), ` +
      'and what it holds comes back here. Nothing is deleted anywhere.',
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Use it' })]
  });
  if (!answer.button.accept) {
    return;
  }
  try {
    await sync.useWorkspace(name);
    Notification.success(`This folder now uses the workspace ${name}; its files are coming back.`, {
      autoClose: 5000
    });
  } catch (error) {
    Notification.error(`Cannot use ${name}: ${(error as Error).message}`, { autoClose: false });
  }
}
