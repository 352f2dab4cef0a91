// What each action of the panel would do now, or why it cannot: one answer for the toolbar
// buttons, the overflow menu and the palette, so a greyed-out action always says why (tooltip).
import { ICheckpointKernel } from './api';
import { CheckpointsModel } from './checkpoints';
import { EnvironmentModel } from './environment';
import { RuntimeModel } from './runtime';
import { SyncModel } from './sync';
import { WORDS } from './vocabulary';

export interface IAction {
  enabled: boolean;
  /** What the action does when enabled; why it cannot run when not. */
  tooltip: string;
}

const ACTIONS = WORDS.actions;

function can(tooltip: string): IAction {
  return { enabled: true, tooltip };
}

function cannot(tooltip: string): IAction {
  return { enabled: false, tooltip };
}

export function persistAction(sync: SyncModel): IAction {
  const status = sync.status;
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
    `${ACTIONS.release}: persist everything, then shut the server down so a paid runtime stops`
  );
}

export function snapshotAction(environment: EnvironmentModel): IAction {
  const env = environment.state;
  if (environment.busy) {
    return cannot('A snapshot or a restore of the environment is running');
  }
  if (!env || env.state === 'capturing') {
    return cannot('Reading the environment…');
  }
  return can(
    `${ACTIONS.snapshot}: keep the environment's package list (and wheels of what no index has) in the store`
  );
}

export function restoreEnvironmentAction(environment: EnvironmentModel): IAction {
  const env = environment.state;
  const d = env?.diff;
  if (environment.busy) {
    return cannot('A snapshot or a restore of the environment is running');
  }
  if (!env || env.state === 'capturing') {
    return cannot('Reading the environment…');
  }
  if (env.state === 'error') {
    return cannot('Cannot read the environment (see the Environment section)');
  }
  if (env.state === 'no-snapshot' || !d) {
    return cannot(
      'Nothing to restore: the store has no usable snapshot yet (Snapshot now takes one)'
    );
  }
  if (d.removed.length + d.changed.length === 0) {
    return cannot(
      d.added.length
        ? 'Nothing to restore: only packages added since the snapshot (a restore installs, it never uninstalls)'
        : 'Nothing to restore: the environment matches the snapshot'
    );
  }
  const count = d.removed.length + d.changed.length;
  return can(
    `${ACTIONS.restore_environment}: install the ${count} package${count === 1 ? '' : 's'} that differ from the snapshot, from the store's wheels first`
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

export function checkpointAction(kernel: ICheckpointKernel, model: CheckpointsModel): IAction {
  if (kernel.writing) {
    return cannot('A checkpoint of this notebook is being written');
  }
  if (kernel.pending || model.requested.has(kernel.kernel_id)) {
    return cannot(
      kernel.cell_running ? 'Requested: it is saved at the next step' : 'Requested: saving…'
    );
  }
  return can(`${ACTIONS.checkpoint}: save what this notebook tracks at its next safe step`);
}
