// Saves this page's open documents when the server asks (before every persist, whichever
// browser started it), over a websocket the page keeps open, and answers with what was saved
// and what could not be.
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { Contents } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';

import {
  documentsStreamUrl,
  IDocumentFailure,
  IDocumentsSaved,
  ISaveDocumentsRequest
} from './api';

const MAX_BACKOFF_MS = 30000;
/** The shell areas that hold documents (both JupyterLab's and Notebook 7's shells know them). */
const DOCUMENT_AREAS = ['main', 'down'];

export class DocumentSaver implements IDisposable {
  constructor(
    private _app: JupyterFrontEnd,
    private _docManager: IDocumentManager
  ) {}

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Connect, and stay connected (reconnecting with back-off) until disposed. */
  start(): void {
    this._open();
  }

  dispose(): void {
    if (!this._disposed) {
      this._disposed = true;
      window.clearTimeout(this._retryTimer);
      this._socket?.close();
    }
  }

  private _open(): void {
    if (this._disposed) {
      return;
    }
    // The name the server gives this page if it ever fails to answer.
    const socket = new WebSocket(
      documentsStreamUrl(`${this._app.name} ${window.location.pathname}`)
    );
    this._socket = socket;
    socket.onopen = () => {
      this._backoff = 1000;
    };
    socket.onmessage = event => {
      let message: { type?: string; message?: string };
      try {
        message = JSON.parse(event.data);
      } catch {
        return; // not for this version of the page
      }
      if (message.type === 'save-documents') {
        void this._answer(socket, message as unknown as ISaveDocumentsRequest);
      } else if (message.type === 'error') {
        console.error('jupyter_gpu_ws: the server did not understand an answer:', message.message);
      }
    };
    socket.onclose = () => {
      if (this._disposed) {
        return;
      }
      this._retryTimer = window.setTimeout(() => this._open(), this._backoff);
      this._backoff = Math.min(this._backoff * 2, MAX_BACKOFF_MS);
    };
  }

  private async _answer(socket: WebSocket, request: ISaveDocumentsRequest): Promise<void> {
    const result = await saveOpenDocuments(this._app, this._docManager, request.timeout * 1000);
    const answer: IDocumentsSaved = {
      type: 'documents-saved',
      request_id: request.request_id,
      ...result
    };
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(answer));
    }
  }

  private _disposed = false;
  private _socket: WebSocket | null = null;
  private _backoff = 1000;
  private _retryTimer = 0;
}

/** Save every open document with unsaved changes, all at once, within `timeoutMs`. Nothing
 * asks the user anything: a document that cannot be saved unattended is reported instead. */
export async function saveOpenDocuments(
  app: JupyterFrontEnd,
  docManager: IDocumentManager,
  timeoutMs: number
): Promise<{ saved: string[]; failed: IDocumentFailure[] }> {
  const saved: string[] = [];
  const failed: IDocumentFailure[] = [];
  let timer = 0;
  const outOfTime = new Promise<'late'>(resolve => {
    timer = window.setTimeout(() => resolve('late'), timeoutMs);
  });
  const contents = app.serviceManager.contents;
  await Promise.all(
    dirtyContexts(app, docManager).map(async context => {
      try {
        const outcome = await Promise.race([save(context, contents), outOfTime]);
        if (outcome === 'late') {
          failed.push({
            path: context.path,
            error: `still saving after ${Math.round(timeoutMs / 1000)} s`
          });
        } else {
          saved.push(context.path);
        }
      } catch (error) {
        failed.push({ path: context.path, error: reason(error) });
      }
    })
  );
  window.clearTimeout(timer);
  return { saved, failed };
}

/** Each document open in the page once (a document in two views has one context). */
function dirtyContexts(
  app: JupyterFrontEnd,
  docManager: IDocumentManager
): DocumentRegistry.Context[] {
  const found = new Set<DocumentRegistry.Context>();
  for (const area of DOCUMENT_AREAS) {
    let widgets: IterableIterator<Widget>;
    try {
      widgets = app.shell.widgets(area);
    } catch {
      continue; // a shell without this area
    }
    for (const widget of widgets) {
      const context = docManager.contextForWidget(widget);
      if (context && context.isReady && context.model.dirty) {
        found.add(context);
      }
    }
  }
  return [...found];
}

async function save(
  context: DocumentRegistry.Context,
  contents: Contents.IManager
): Promise<'saved'> {
  if (context.model.readOnly || context.contentsModel?.writable === false) {
    throw new Error('the file is read-only');
  }
  // JupyterLab would ask whether to overwrite a file changed on disk since it was opened: nobody
  // may be there to answer, and overwriting could lose the other change.
  if (await changedOnDisk(context, contents)) {
    throw new Error(
      'it changed on disk since it was opened here; save it by hand to choose which version to keep'
    );
  }
  await context.save();
  return 'saved';
}

/** The same test JupyterLab makes before saving: the hash where the server gives one, else the
 * modification time beyond the context's margin. */
async function changedOnDisk(
  context: DocumentRegistry.Context,
  contents: Contents.IManager
): Promise<boolean> {
  const known = context.contentsModel;
  if (!known) {
    return false;
  }
  let disk: Contents.IModel;
  try {
    disk = await contents.get(context.path, { content: false, hash: true });
  } catch {
    return false; // gone from disk: saving writes it again, as JupyterLab does
  }
  if (known.hash && disk.hash) {
    return known.hash !== disk.hash;
  }
  return (
    !!known.last_modified &&
    new Date(disk.last_modified).getTime() - new Date(known.last_modified).getTime() >
      context.lastModifiedCheckMargin
  );
}

function reason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message || 'unknown error';
}
