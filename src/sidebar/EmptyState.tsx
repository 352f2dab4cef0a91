// A section with nothing to show says so in one line, with what to do about it: a snippet to
// copy into a notebook and a link to the page that explains it.
import React from 'react';
import { Clipboard, Notification } from '@jupyterlab/apputils';

import { docsUrl } from '../vocabulary';

export function EmptyState(props: {
  text: string;
  /** The longer explanation, as the text's tooltip. */
  title?: string;
  /** Code to paste into a notebook; "Copy snippet" puts it on the clipboard. */
  snippet?: string;
  /** A page of the documentation, e.g. 'checkpoints.md'. */
  docs?: string;
  testId?: string;
}): JSX.Element {
  const { snippet, docs } = props;
  return (
    <div className="jp-gpuws-empty" data-testid={props.testId}>
      <span className="jp-gpuws-empty-text" title={props.title ?? props.text}>
        {props.text}
      </span>
      {snippet && (
        <button
          className="jp-gpuws-link"
          title={`Copy to the clipboard:\n${snippet}`}
          data-testid="gpuws-copy-snippet"
          onClick={() => {
            Clipboard.copyToSystem(snippet);
            Notification.info('Copied: paste it into a notebook cell', { autoClose: 3000 });
          }}
        >
          Copy snippet
        </button>
      )}
      {docs && (
        <a
          className="jp-gpuws-link"
          href={docsUrl(docs)}
          target="_blank"
          rel="noopener noreferrer"
          title={docsUrl(docs)}
        >
          Docs
        </a>
      )}
    </div>
  );
}
