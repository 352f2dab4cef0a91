// A job that waits for the user's approval: what approving it runs, in its card and in the
// dialog that Approve opens (escaped: it is the store's), and that only the dialog's OK runs it.
import React from 'react';
import { showDialog } from '@jupyterlab/apputils';

import { IUserJob, IUserJobApproval } from '../api';
import { ApprovalDetails, approveJob } from '../jobs/actions';
import { JobsModel } from '../jobs/model';
import { changedLines, commandText, folderText } from '../jobs/words';

jest.mock('../api', () => ({ listJobs: jest.fn(), restartJob: jest.fn(), jobLog: jest.fn() }));
jest.mock('@jupyterlab/apputils', () => ({
  showDialog: jest.fn(),
  Dialog: {
    cancelButton: () => ({ label: 'Cancel', accept: false }),
    okButton: (options: object) => ({ label: 'OK', accept: true, ...options })
  },
  Notification: {}
}));
jest.mock('@jupyterlab/ui-components', () => ({
  // A class (the run's choice in Run as job extends it) whose create() the dialog's body uses.
  ReactWidget: class {
    static create(element: unknown): unknown {
      return { element, addClass: jest.fn() };
    }
  }
}));

const dialog = showDialog as jest.MockedFunction<typeof showDialog>;

const APPROVAL: IUserJobApproval = {
  reason: 'not signed',
  command: ['python', 'tr\x1bain.py', '--note', 'a b', "it's"],
  cwd: 'sub\u202e',
  notebook: null,
  changed: [
    { path: 'sub/train.py', change: 'changed' },
    { path: 'sub/new\x1b[1m.py', change: 'added' }
  ],
  changed_more: 1203
};

function job(fields: Partial<IUserJob> = {}): IUserJob {
  // Cast: a test names only the fields it is about.
  return {
    id: 'j1',
    name: '\x1b[31mplanted',
    command: APPROVAL.command,
    state: 'interrupted',
    needs_approval: true,
    approval: APPROVAL,
    ...fields
  } as IUserJob;
}

/** The text of each element with a data-testid in what a component renders (no DOM here). */
function texts(node: React.ReactNode, found: { [id: string]: string } = {}): string {
  if (node === null || node === undefined || typeof node === 'boolean') {
    return '';
  }
  if (typeof node === 'string' || typeof node === 'number') {
    return String(node);
  }
  if (Array.isArray(node)) {
    return node.map(child => texts(child, found)).join('');
  }
  const element = node as React.ReactElement<{ [key: string]: unknown }>;
  if (typeof element.type === 'function') {
    return texts((element.type as (p: unknown) => React.ReactNode)(element.props), found);
  }
  const text = texts(element.props.children as React.ReactNode, found);
  const id = element.props['data-testid'];
  if (typeof id === 'string') {
    found[id] = text;
  }
  return text;
}

describe('what approving a job runs, in words', () => {
  it('writes the command as a shell takes it back, escaped', () => {
    expect(commandText(APPROVAL.command)).toBe("python 'tr\\x1bain.py' --note 'a b' 'it'\"'\"'s'");
    expect(commandText(['python', 'train.py', ''])).toBe("python train.py ''");
  });

  it('names the folder, or the work directory', () => {
    expect(folderText('sub\u202e')).toBe('sub\\u202e');
    expect(folderText('')).toBe('the work directory');
  });

  it('lists the changed files, escaped, and how many more', () => {
    expect(changedLines(APPROVAL)).toEqual([
      'sub/train.py (changed)',
      'sub/new\\x1b[1m.py (added)',
      'and 1,203 more'
    ]);
    expect(changedLines({ ...APPROVAL, changed: [], changed_more: 0 })).toEqual([]);
  });
});

describe('the approval view', () => {
  it('shows the command, the folder and the changed files, escaped', () => {
    const shown: { [id: string]: string } = {};
    const all = texts(React.createElement(ApprovalDetails, { approval: APPROVAL }), shown);
    expect(shown['gpuws-job-approval-command']).toBe(commandText(APPROVAL.command));
    expect(shown['gpuws-job-approval-cwd']).toBe('in sub\\u202e');
    expect(shown['gpuws-job-approval-changed']).toContain('sub/new\\x1b[1m.py (added)');
    expect(shown['gpuws-job-approval-changed']).toContain('and 1,203 more');
    expect(shown['gpuws-job-approval-reason']).toBeUndefined();
    expect(all).not.toContain('\x1b');
    expect(all).not.toContain('\u202e');
  });

  it('with the reason in the dialog, and no changed files where none changed', () => {
    const shown: { [id: string]: string } = {};
    const approval = {
      ...APPROVAL,
      reason: 'started in another workspace (\u2066x)',
      changed: [],
      changed_more: 0
    };
    texts(React.createElement(ApprovalDetails, { approval, reason: true }), shown);
    expect(shown['gpuws-job-approval-reason']).toBe(
      'Why it asks: started in another workspace (\\u2066x)'
    );
    expect(shown['gpuws-job-approval-changed']).toBeUndefined();
  });
});

describe('Approve', () => {
  let model: JobsModel;
  let act: jest.SpyInstance;

  beforeEach(() => {
    model = new JobsModel();
    act = jest.spyOn(model, 'act').mockResolvedValue();
    dialog.mockReset();
  });

  afterEach(() => model.dispose());

  it('asks first, with what it runs, Cancel the default: Cancel runs nothing', async () => {
    dialog.mockResolvedValueOnce({ button: { accept: false } } as never);
    expect(await approveJob(model, job())).toBe(false);
    expect(act).not.toHaveBeenCalled();
    const options = dialog.mock.calls[0][0] ?? {};
    expect(options.title).toBe('Run \\x1b[31mplanted?');
    expect(options.defaultButton).toBe(0);
    expect((options.buttons ?? []).map(b => b.accept)).toEqual([false, true]);
    const shown: { [id: string]: string } = {};
    texts((options.body as unknown as { element: React.ReactNode }).element, shown);
    expect(shown['gpuws-job-approval-command']).toBe(commandText(APPROVAL.command));
    expect(shown['gpuws-job-approval-reason']).toBe('Why it asks: not signed');
  });

  it('runs it on OK only', async () => {
    dialog.mockResolvedValueOnce({ button: { accept: true } } as never);
    expect(await approveJob(model, job())).toBe(true);
    expect(act).toHaveBeenCalledWith(job(), 'approve');
  });
});
