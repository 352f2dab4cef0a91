// A job in the user's words: its state and tone, what it runs, its step and ETA, a relaunch
// due, what approving it runs, and the folded section's few words. Every text of a job comes
// from the store, which this runtime does not control: shown() escapes it.
import { IBringHome, IElsewhereJob, IUserJob, IUserJobApproval } from '../api';
import { shown } from '../shown';
import { ago, count, duration, shortPath, size, stepOf, wholeNumber } from '../vocabulary';
import type { JobAction } from './model';

const ACTION_VERBS: { [action in JobAction]: string } = {
  stop: 'stop',
  restart: 'restart',
  hold: 'hold',
  release: 'stop holding',
  approve: 'approve'
};

/** What an action does, as a verb: "stop", "stop holding". */
export function actionVerb(action: JobAction): string {
  return ACTION_VERBS[action];
}

/** The job's state in a word or two: its state, or "needs approval" before a relaunch this runtime
 * cannot vouch for. */
export function jobStateWord(job: IUserJob): string {
  return job.needs_approval ? 'needs approval' : job.state;
}

/** The colour of a job's state word: the panel's ok / pending / error / subtle styles. */
export function jobTone(job: IUserJob): 'ok' | 'pending' | 'error' | 'none' {
  if (job.needs_approval) {
    return 'pending';
  }
  switch (job.state) {
    case 'running':
    case 'relaunched':
    case 'finished':
      return 'ok';
    case 'interrupted':
    case 'retrying':
    case 'held':
      return 'pending';
    case 'failed':
      return 'error';
    default:
      return 'none';
  }
}

/** What the job runs, as the user recognises it: the notebook, or the command's script. */
export function jobWhat(job: IUserJob): string {
  if (job.notebook) {
    return shown(shortPath(job.notebook));
  }
  return shown(job.command.find(part => /\.(py|sh|ipynb)$/.test(part)) ?? commandText(job.command));
}

const QUOTE = "'\"'\"'"; // a quote inside single quotes: end them, a quoted quote, begin again

/** A command as a shell would take it back, as Python's shlex.join writes it (an argument with
 * a space or a quote in single quotes), escaped: `python train.py --note 'a b'`. */
export function commandText(command: string[]): string {
  return shown(
    command
      .map(part =>
        part === '' ? "''" : /[^\w@%+=:,./-]/.test(part) ? `'${part.replace(/'/g, QUOTE)}'` : part
      )
      .join(' ')
  );
}

/** The job's folder: "sub/dir", or "the work directory". */
export function folderText(cwd: string): string {
  return cwd ? shown(cwd) : 'the work directory';
}

/** Its code's changed files, each as "sub/train.py (changed)", and "and 3 more" after them. */
export function changedLines(approval: IUserJobApproval): string[] {
  const lines = approval.changed.map(c => `${shown(c.path)} (${c.change})`);
  if (approval.changed_more > 0) {
    lines.push(`and ${wholeNumber(approval.changed_more)} more`);
  }
  return lines;
}

/** The job's run, as the Training and Checkpoints sections name it: "run train.py-89ab", "run
 * trainA, resumed from step 1,400"; null for a record from before runs were named by job. */
export function jobRunText(job: IUserJob): string | null {
  if (!job.run) {
    return null;
  }
  const resumed =
    job.resumed_step !== null && job.resumed_step !== undefined
      ? `, resumed from step ${wholeNumber(job.resumed_step)}`
      : '';
  return `run ${shown(job.run)}${resumed}`;
}

/** "step 4,120/10,000", or null before the job's run has a step. */
export function jobStepText(job: IUserJob): string | null {
  if (job.step === null) {
    return null;
  }
  return stepOf(job.step, job.total_steps);
}

/** "ETA 13 min" while the job runs and its run has one. */
export function jobEtaText(job: IUserJob): string | null {
  const running = ['running', 'relaunched'].includes(job.state);
  return running && job.eta_seconds !== null ? `ETA ${duration(job.eta_seconds)}` : null;
}

/** "train.py will be relaunched from step 4,120 once the restore ends", while a relaunch is due. */
export function relaunchText(job: IUserJob): string {
  const from = job.step !== null ? ` from step ${wholeNumber(job.step)}` : '';
  return `${jobWhat(job)} will be relaunched${from} once the restore ends`;
}

/** The folded section's few words: "1 running · 1 failed", "1 to relaunch", "… · 2 elsewhere". */
export function jobsSummary(jobs: IUserJob[], pending: string[], elsewhere = 0): string {
  const words = new Map<string, number>();
  for (const job of jobs) {
    const word =
      pending.includes(job.id) && job.state === 'interrupted' ? 'to relaunch' : jobStateWord(job);
    words.set(word, (words.get(word) ?? 0) + 1);
  }
  const here =
    words.size > 2
      ? count(jobs.length, 'job')
      : [...words].map(([word, n]) => `${n} ${word}`).join(' · ');
  return [here, elsewhere ? `${elsewhere} elsewhere` : ''].filter(Boolean).join(' · ');
}

/** A job run elsewhere's state in a word or two: "starting", "running", "finished", "failed
 * (exit status 3)". */
export function elsewhereStateWord(job: IElsewhereJob): string {
  if (job.state !== 'ended') {
    return job.state;
  }
  if (job.returncode === 0) {
    return 'finished';
  }
  return job.returncode === null ? 'ended' : `failed (exit status ${job.returncode})`;
}

/** The colour of a job run elsewhere's state word. */
export function elsewhereTone(job: IElsewhereJob): 'ok' | 'pending' | 'error' | 'none' {
  if (job.state === 'starting') {
    return 'pending';
  }
  if (job.state === 'running' || job.returncode === 0) {
    return 'ok';
  }
  return job.returncode === null ? 'none' : 'error';
}

/** Where it runs and how far it is: "on train-pod-7f9c4 · step 29 · 4 outputs (1.2 KiB) · last
 * heard of 2 min ago" (`now`: this page's clock, epoch seconds). */
export function elsewhereLine(job: IElsewhereJob, now: number): string {
  const parts: string[] = [];
  if (job.host) {
    parts.push(`on ${shown(job.host)}`);
  }
  if (job.step !== null) {
    parts.push(`step ${wholeNumber(job.step)}`);
  }
  parts.push(`${count(job.outputs_count, 'output')} (${size(job.outputs_bytes)})`);
  if (job.updated !== null) {
    parts.push(`last heard of ${ago(now - job.updated)}`);
  }
  return parts.join(' · ');
}

/** What a Bring home did, in a line and one line per file kept beside the user's: "2 files
 * brought, 1 replaced, 1 beside yours". */
export function homecomingLines(answer: IBringHome): string[] {
  const { counts } = answer;
  const parts = [`${count(counts.brought, 'file')} brought`];
  if (counts.replaced) {
    parts.push(`${wholeNumber(counts.replaced)} replaced (as the job began from them)`);
  }
  if (counts.beside) {
    parts.push(`${wholeNumber(counts.beside)} beside yours (changed here since the job began)`);
  }
  if (counts.same) {
    parts.push(`${wholeNumber(counts.same)} already here`);
  }
  return [
    parts.join(', '),
    ...answer.beside.map(
      item => `${shown(item.path)} kept: the job's version is ${shown(item.beside)}`
    ),
    ...answer.skipped.map(item => `${shown(item.path)} not brought: ${shown(item.reason)}`),
    ...answer.errors.map(error => `error: ${shown(error)}`)
  ];
}
