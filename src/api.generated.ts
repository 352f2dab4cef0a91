// Generated from docs/openapi.yaml by `jlpm run api:generate`: do not edit.
// Change the YAML (the API's one description) and generate again; `jlpm run api:check`
// (scripts/test.sh) fails while this file is out of date.
export interface paths {
  '/gpuws/api/metrics': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The latest monitor sample, and history after `since` */
    get: {
      parameters: {
        query?: {
          /** @description Seconds since the epoch; given twice, a 400 */
          since?: number;
        };
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The latest sample (with `history` and `history_seconds` when `since` is given) */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json':
              components['schemas']['Sample'] | components['schemas']['MetricsWithHistory'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/metrics/stream': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** Websocket; one Sample (JSON text) per sampler tick */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Switching to the websocket protocol */
        101: {
          headers: {
            [name: string]: unknown;
          };
          content?: never;
        };
        /** @description Not a websocket handshake (a plain HTTP request) */
        400: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'text/html': string;
          };
        };
        401: components['responses']['Unauthenticated'];
        /** @description Not authenticated, not authorised on "gpuws", or from another origin */
        403: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'text/html': string;
          };
        };
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/documents/stream': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** Websocket; the server asks the page to save its open documents before a persist ({"type": "save-documents", "request_id", "timeout"}); the page answers {"type": "documents-saved", "request_id", "saved": [path], "failed": [{path, error}]} */
    get: {
      parameters: {
        query?: {
          /** @description How the page calls itself, named in the persist's result if it does not answer (its first 200 printable characters) */
          page?: string;
        };
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Switching to the websocket protocol */
        101: {
          headers: {
            [name: string]: unknown;
          };
          content?: never;
        };
        /** @description Not a websocket handshake (a plain HTTP request) */
        400: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'text/html': string;
          };
        };
        401: components['responses']['Unauthenticated'];
        /** @description Not authenticated, not authorised to write "gpuws", or from another origin */
        403: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'text/html': string;
          };
        };
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** Sync state */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description state, pending files and bytes, last sync and error, store usage and quota, lease, latest persist, how changes are watched, entries of a local store skipped as links or special files */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['SyncStatus'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/pending': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The files not yet in the store, each with why, and the files that cannot be synced */
    get: {
      parameters: {
        query?: {
          limit?: number;
        };
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description failing first, then uploading, deleting, waiting; largest first within each */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['PendingList'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/workspaces': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The workspaces of the store, each with its files, bytes and last write, and the one in use */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description newest write first */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Workspaces'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description The store cannot be read (the message says why) */
        503: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/workspaces/use': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** This work directory uses another workspace of the store from now on (remembered on this machine); the sync restarts there and restores */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json': {
            /** @description a workspace of the store (not "." or "..") */
            name: string;
          };
        };
      };
      responses: {
        /** @description The workspaces */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Workspaces'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description No such workspace in the store (the message names those it holds) */
        404: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        /** @description The store cannot be read (the message says why) */
        503: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/checkpoints/fetch': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** The run's newest checkpoint in the store made complete here (what gpuws.resume() asks), as a job */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json': {
            run: string;
            timeout?: number;
          };
        };
      };
      responses: {
        202: components['responses']['Job'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description The sync is turned off */
        409: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/checkpoints/fetch/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The fetch job's state, progress and result */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    put?: never;
    post?: never;
    /** Cancel the fetch */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Cancelling */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/lease': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Take over the workspace lease (from a live holder too, over an unreadable lease) */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json': {
            /** @enum {boolean} */
            take_over: true;
          };
        };
      };
      responses: {
        /** @description This runtime now holds the lease (state taking-over until the previous holder's time is up, then it writes); it restores and rescans */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['SyncStatus'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description Another runtime took the lease at the same moment (the message says who), or the work directory is missing */
        409: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/restore': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Bring back what the work directory lacks */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: components['requestBodies']['NoOptions'];
      responses: {
        202: components['responses']['Job'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/sync/restore/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The job's state, steps, progress, errors and result */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    put?: never;
    post?: never;
    /** Cancel the job (what is done stays done); no body, or an empty object */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Cancelling (or already ended) */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/persist': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Persist now - the open pages save their documents, then checkpoints, environment snapshot, Git commit, then the sync */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: components['requestBodies']['NoOptions'];
      responses: {
        202: components['responses']['Job'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        409: components['responses']['ReadOnly'];
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/persist/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The job's state, steps, progress, errors and result */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    put?: never;
    post?: never;
    /** Cancel the job (what is done stays done); no body, or an empty object */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Cancelling (or already ended) */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/checkpoints': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** Kernels of this server that track training state, and distributed runs */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Each kernel running the checkpoint agent; each distributed run */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['CheckpointKernels'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    /** Ask one kernel, one distributed run (every rank saves at the step they agree on), or all, for a checkpoint at their next safe point */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json':
            | {
                kernel_id: string;
              }
            | {
                run_id: string;
              }
            | {
                /** @enum {boolean} */
                all: true;
              };
        };
      };
      responses: {
        /** @description One request per kernel or run asked */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['CheckpointRequests'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description No such kernel or distributed run */
        404: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        /** @description The kernel runs no checkpoint agent or tracks nothing yet */
        409: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/training': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** Every tracked run with its pace, ETA, the verdict against the runtime's deadline, its loss sparkline and open anomalies */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description live runs first, then the runs found in the checkpoints */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Training'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/training/history': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The curves of every run (or one) over steps, and each GPU's utilisation and memory over time */
    get: {
      parameters: {
        query?: {
          run?: string;
        };
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description the curves */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['TrainingHistory'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description No such run */
        404: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/runtime': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The runtime's countdown */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description start, deadline, source, remaining, every source, idle seconds and idle deadline, preemption, next automatic persist, notices, automatic and emergency persists, release, Git status */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Runtime'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/runtime/release': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Persist, then shut the server down (kept running if the persist fails, unless force) */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: {
        content: {
          'application/json': {
            force?: boolean;
          };
        };
      };
      responses: {
        /** @description The persist job */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        409: components['responses']['ReadOnly'];
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/env': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The kernels' environment against the latest snapshot */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description state, python, current, latest, diff, compatibility, sources (what a restore of the latest snapshot would fetch and build from VCS or URL sources), snapshots, error (also a refused snapshot), snapshot_job, restore_job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['EnvState'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/env/snapshots': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Take an environment snapshot (a new one only when something changed) */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: components['requestBodies']['NoOptions'];
      responses: {
        202: components['responses']['Job'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/env/snapshots/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The job's state, steps, progress, errors and result */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    put?: never;
    post?: never;
    /** Cancel the job (what is done stays done); no body, or an empty object */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Cancelling (or already ended) */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/env/restore': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    get?: never;
    put?: never;
    /**
     * Install what differs from a snapshot (the latest by default)
     * @description The snapshot is checked before anything is installed (PEP 503 names, PEP 440 versions, well-formed origins); packages whose origin is a VCS commit or a URL are fetched and built only with allow_sources. The job's result.sources lists them from the start.
     */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: {
        content: {
          'application/json': {
            /** @description A snapshot id; none or null for the latest */
            snapshot?: string | null;
            /** @description Install from the store's wheels only */
            offline?: boolean;
            /** @description Also remove packages the snapshot does not have */
            uninstall?: boolean;
            /**
             * @description fetch and build VCS and URL sources (their build code runs on this machine)
             * @default false
             */
            allow_sources?: boolean;
          };
        };
      };
      responses: {
        202: components['responses']['Job'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description No such snapshot in the store */
        404: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        /** @description The restore would fetch and build VCS or URL sources and allow_sources is not set (the message names them), or the interpreter is missing or does not run */
        409: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        /** @description The store's snapshot is refused: an entry no installer wrote (the message names it); nothing is installed */
        422: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/env/restore/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The job's state, steps, progress, errors and result */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    put?: never;
    post?: never;
    /** Cancel the job (what is done stays done); no body, or an empty object */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Cancelling (or already ended) */
        202: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Job'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoJob'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs': {
    parameters: {
      query?: never;
      header?: never;
      path?: never;
      cookie?: never;
    };
    /** The jobs (scripts and notebooks the server runs, and those the store records), and what the next relaunch runs */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Every job */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['UserJobs'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
      };
    };
    put?: never;
    /** Start a command or a notebook as a job of the server */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path?: never;
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json': components['schemas']['UserJobRequest'];
        };
      };
      responses: {
        201: components['responses']['UserJob'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        409: components['responses']['NoJobKey'];
        /** @description The request body is larger than any this API takes */
        413: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs/{id}': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** One job */
    get: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        200: components['responses']['UserJob'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoUserJob'];
        503: components['responses']['JobsNotRead'];
      };
    };
    put?: never;
    post?: never;
    /** Stop a running job (its run checkpoints first) and keep it as stopped; forget one that is not running */
    delete: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description Stopped */
        204: {
          headers: {
            [name: string]: unknown;
          };
          content?: never;
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoUserJob'];
        503: components['responses']['JobsNotRead'];
      };
    };
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs/{id}/log': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    /** The last lines of the job's output, or what it wrote since an earlier answer */
    get: {
      parameters: {
        query?: {
          lines?: number;
          /** @description an earlier answer's next; the output written since (about 1 MiB at most, the rest at the next ask) instead of the last lines */
          after?: string;
        };
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: never;
      responses: {
        /** @description The lines, oldest first */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': {
              lines: string[];
              /** @description the last line is not ended yet; what comes next continues it */
              open: boolean;
              /** @description where the output goes on: pass it as after to get what is written next */
              next: string;
            };
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoUserJob'];
        503: components['responses']['JobsNotRead'];
      };
    };
    put?: never;
    post?: never;
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs/{id}/restart': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Run the job again, from its newest checkpoint; for a job that needs approval, this is the approval */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody?: components['requestBodies']['NoOptions'];
      responses: {
        200: components['responses']['UserJob'];
        /** @description The job is running */
        400: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoUserJob'];
        409: components['responses']['NoJobKey'];
        503: components['responses']['JobsNotRead'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs/elsewhere/{id}/bring-home': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        /** @description the job's id (`j-` and 12 hex digits), as `run --export k8s` printed it */
        id: string;
      };
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Bring a job run elsewhere home: its outputs and its runs' complete checkpoints into the work directory, never over a file changed here since the job began (the job's version lands beside it) */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          /** @description the job's id (`j-` and 12 hex digits), as `run --export k8s` printed it */
          id: string;
        };
        cookie?: never;
      };
      requestBody?: components['requestBodies']['NoOptions'];
      responses: {
        /** @description What became of each file */
        200: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['BringHome'];
          };
        };
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        /** @description No job with this id has run elsewhere in this workspace */
        404: {
          headers: {
            [name: string]: unknown;
          };
          content: {
            'application/json': components['schemas']['Error'];
          };
        };
        503: components['responses']['SyncNotRunning'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
  '/gpuws/api/jobs/{id}/hold': {
    parameters: {
      query?: never;
      header?: never;
      path: {
        id: string;
      };
      cookie?: never;
    };
    get?: never;
    put?: never;
    /** Hold a job that waits to be relaunched (it is not, until released), or release it */
    post: {
      parameters: {
        query?: never;
        header?: never;
        path: {
          id: string;
        };
        cookie?: never;
      };
      requestBody: {
        content: {
          'application/json': {
            hold: boolean;
          };
        };
      };
      responses: {
        200: components['responses']['UserJob'];
        400: components['responses']['BadRequest'];
        401: components['responses']['Unauthenticated'];
        403: components['responses']['Forbidden'];
        404: components['responses']['NoUserJob'];
        503: components['responses']['JobsNotRead'];
      };
    };
    delete?: never;
    options?: never;
    head?: never;
    patch?: never;
    trace?: never;
  };
}
export type webhooks = Record<string, never>;
export interface components {
  schemas: {
    UserJobAttempt: {
      number: number;
      started: number;
      ended: number | null;
      /** @description the host name of the runtime that ran it */
      host: string;
      returncode: number | null;
      /** @description why it ended */
      reason: string | null;
      /** @description whether retrying can change it (null for an interruption or a success) */
      retryable: boolean | null;
      step: number | null;
      /** @description what it ran on where not what was asked (relaunched on 1 GPU of the 2 asked: torchrun --nproc-per-node 1) */
      runs_on: string | null;
    };
    UserJobChange: {
      /** @description a file of the job's code, relative to the work directory */
      path: string;
      /**
       * @description what became of it since the record was signed
       * @enum {string}
       */
      change: 'changed' | 'added' | 'missing';
    };
    /** @description What the user approves by restarting a job that needs approval: as the store's record says it, which this runtime cannot vouch for (show it escaped) */
    UserJobApproval: {
      /** @description why it is not run without the user's say: not signed, signed with another key, started in another workspace, its code changed */
      reason: string;
      /** @description what runs */
      command: string[];
      /** @description its folder, relative to the work directory */
      cwd: string;
      notebook: string | null;
      /** @description its code's files changed since the record was signed (the first few) */
      changed: components['schemas']['UserJobChange'][];
      /** @description how many more changed than are listed */
      changed_more: number;
    };
    /** @description A script or notebook the server runs as a job (docs/jobs.md) */
    UserJob: {
      id: string;
      name: string;
      /** @enum {string} */
      kind: 'command' | 'notebook';
      command: string[];
      notebook: string | null;
      /** @description the copy of the notebook its outputs are written into */
      output: string | null;
      /** @description the job's folder */
      cwd: string;
      gpus: number | null;
      retries: number;
      /** @enum {string} */
      state:
        | 'queued'
        | 'running'
        | 'interrupted'
        | 'relaunched'
        | 'retrying'
        | 'finished'
        | 'failed'
        | 'stopped'
        | 'held';
      reason: string | null;
      attempts: components['schemas']['UserJobAttempt'][];
      /** @description its run: named when it was asked for (its name, else its script's or notebook's and the end of its id, or the run it resumes); what its process's gpuws.track() names, which a name given to track() replaces; null in a record from before runs were named by job */
      run: string | null;
      /** @description where it was asked to resume an existing run: that run's newest checkpoint's step then; null for a new run */
      resumed_step?: number | null;
      step: number | null;
      total_steps: number | null;
      eta_seconds: number | null;
      /** @description the run's verdict against the runtime's deadline (null without a deadline */
      verdict: string | null;
      log_tail: string[];
      /** @description what the next relaunch does with it, before it does; once relaunched, on which environment where that differed from the snapshot */
      relaunch: string | null;
      /** @description a record this machine's key did not sign for this workspace; runs only after a restart */
      needs_approval: boolean;
      /** @description null unless the job needs approval; else what restarting it approves */
      approval: components['schemas']['UserJobApproval'] | null;
      created: number;
      updated: number;
    };
    /** @description A command or a notebook, not both (the server refuses either none or both: a 400 that says so) */
    UserJobRequest: {
      /** @description the program (found on the server's PATH, or a path in cwd) and its arguments. These limits (with those of name, retries, gpus and cwd) are the job records' too: a job the API takes survives every relaunch */
      command?: string[];
      /** @description a .ipynb path relative to the work directory */
      notebook?: string;
      name?: string;
      /** @default 0 */
      retries?: number;
      /** @description at most the GPUs this machine has, where it can count them */
      gpus?: number | null;
      /**
       * @description a folder of the work directory
       * @default
       */
      cwd?: string;
      /** @description the run to continue: one of the work directory's runs with a checkpoint (its name or its folder's, as the Training section lists it), which no active job writes; without it the job starts a new run of its own (a 400 lists the runs there are) */
      resume?: string;
    };
    /** @description A job run elsewhere (the pod of `run --export k8s`, a machine started by hand): as its own area of the workspace in the store says it, which anyone with access to the store writes (every text escaped as names.shown() writes it; docs/jobs.md) */
    ElsewhereJob: {
      id: string;
      name: string;
      /**
       * @description starting: its restore runs (no record yet); ended: its command ended, and its last files were sent
       * @enum {string}
       */
      state: 'starting' | 'running' | 'ended';
      /** @description the command's exit status once ended (negative: the signal that ended it) */
      returncode: number | null;
      /** @description the machine (a pod's name) it runs on */
      host: string | null;
      command: string[];
      cwd: string;
      /** @description why its last send to the store failed */
      error: string | null;
      /** @description the highest step of its runs' newest complete checkpoints in the store */
      step: number | null;
      checkpoints: {
        run: string;
        checkpoint: string;
      }[];
      /** @description the files it created or changed, other than checkpoints (the first 20 by path) */
      outputs: {
        path: string;
        size: number;
      }[];
      outputs_count: number;
      outputs_bytes: number;
      /** @description files of its area not looked at (over 10,000) */
      files_more: number;
      /** @description when it began, by the store's clock (epoch seconds) */
      started: number | null;
      /** @description when its record was last written, by the store's clock */
      updated: number | null;
    };
    /** @description The jobs run elsewhere, as the store was last looked at (every 10 s): 50 at most, newest first */
    ElsewhereJobs: {
      jobs: components['schemas']['ElsewhereJob'][];
      /** @description areas not looked at (a look reads 50 at most, jobs and problems together) */
      more: number;
      /** @description areas that cannot be read, each with why; never keeping another from being listed */
      problems: {
        id: string;
        reason: string;
      }[];
      /** @description the store could not be looked at */
      error: string | null;
    };
    /** @description What bringing a job run elsewhere home did, file by file (each list names 500 at most; `counts` counts them all) */
    BringHome: {
      id: string;
      /** @description files that were not here (its checkpoints among them) */
      brought: string[];
      /** @description files here as the job began from them, now the job's version (the workspace's store keeps the previous one as a version) */
      replaced: string[];
      /** @description files changed here since the job began: kept, the job's version beside each */
      beside: {
        path: string;
        beside: string;
      }[];
      /** @description files not brought: a checkpoint not yet complete in the store, a name that leads out of the work directory */
      skipped: {
        path: string;
        reason: string;
      }[];
      counts: {
        brought: number;
        replaced: number;
        beside: number;
        skipped: number;
        /** @description files already here as the job has them */
        same: number;
      };
      errors: string[];
      /** @description files of its area not looked at (over 10,000): bring it home again for them */
      files_more: number;
    };
    UserJobs: {
      jobs: components['schemas']['UserJob'][];
      /** @description the jobs run elsewhere, found in the store (null where the server does not look) */
      elsewhere?: components['schemas']['ElsewhereJobs'] | null;
      relaunch: {
        /** @description c.GpuWorkspace.relaunch_jobs */
        enabled: boolean;
        /** @description the ids the next relaunch runs */
        pending: string[];
      };
      /** @description the store's records could not be read or written, or this runtime has no usable job key */
      error?: string | null;
      /** @description the error is the store's fault the Sync section shows (the panel refers to it instead of repeating it) */
      store_fault?: boolean;
      /** @description record files of the store that cannot be read, each with why; listed until they are gone, and never keeping another record from being listed or relaunched */
      bad_records?: {
        file: string;
        reason: string;
      }[];
    };
    Error: {
      message: string;
      reason?: string | null;
    };
    NoOptions: Record<string, never>;
    Process: {
      /** @description as this server sees it; a kernel's own report may lack one */
      pid: number | null;
      memory_used: number | null;
      kernel_id: string | null;
      kernel_name: string | null;
      notebook: string | null;
      /** @description false for a PID that is no process here (NVML's host PIDs, seen from a container) */
      visible: boolean;
      /** @description "nvml", or "kernel:<figure>" (nvml, torch_reserved, torch_allocated) for a kernel's own report */
      memory_source: string;
    };
    Mig: {
      index: number;
      uuid: string;
      memory_used: number | null;
      memory_total: number | null;
      processes: components['schemas']['Process'][];
    };
    Gpu: {
      index: number;
      name: string;
      uuid: string;
      utilization: number | null;
      memory_used: number | null;
      memory_total: number | null;
      temperature: number | null;
      power_draw: number | null;
      power_limit: number | null;
      sm_clock: number | null;
      processes: components['schemas']['Process'][];
      mig: components['schemas']['Mig'][];
    };
    System: {
      cpu_percent: number;
      cpu_count: number;
      memory_used: number;
      memory_total: number;
      /** @enum {string} */
      limits: 'cgroup' | 'host';
      disks: components['schemas']['Disk'][];
    };
    Disk: {
      label: string;
      path: string;
      used: number;
      total: number;
    };
    Alert: {
      id: string;
      /** @enum {string} */
      kind: 'gpu-idle' | 'gpu-memory' | 'disk';
      subject: string;
      message: string;
      since: number;
    };
    Sample: {
      time: number;
      interval: number;
      gpus: components['schemas']['Gpu'][];
      gpu_error: string | null;
      driver_version: string | null;
      cuda_driver_version: string | null;
      system: components['schemas']['System'];
      alerts: components['schemas']['Alert'][];
    };
    /** @description The latest sample, with the history after `since` */
    MetricsWithHistory: components['schemas']['Sample'] & {
      history: components['schemas']['Sample'][];
      history_seconds: number;
    };
    /** @description Long work (persist, restore, environment snapshot and restore) run in the server */
    Job: {
      id: string;
      /** @enum {string} */
      kind: 'persist' | 'restore' | 'env-snapshot' | 'env-restore' | 'checkpoint-fetch';
      /** @enum {string} */
      state: 'running' | 'done' | 'failed' | 'cancelled';
      /** @description Cancelled while a step that cannot stop midway ends: no further step starts */
      cancelling: boolean;
      started: number;
      finished: number | null;
      steps: {
        name: string;
        /** @enum {string} */
        state: 'pending' | 'running' | 'done' | 'failed' | 'skipped';
        detail: string | null;
      }[];
      /** @description What the running step does now, with its own progress, in the user's words ("Checkpointing 2 kernels", "Snapshotting the environment: building a wheel of mypkg", "Uploading 3 of 12 files"); null once no step runs */
      activity: string | null;
      progress: components['schemas']['Progress'];
      errors: string[];
      result: {
        summary?: components['schemas']['PersistSummary'];
        /** @description who started a persist: user, auto, release, SIGTERM, preemption:<cloud> */
        trigger?: string;
        /** @description the emergency persist that stopped this one before its sync */
        superseded_by?: string | null;
        documents?: components['schemas']['DocumentsReport'];
        /** @description an environment snapshot's outcome */
        environment?: {
          id: string;
          /** @description false when the environment had not changed */
          new: boolean;
        };
        restore?: components['schemas']['EnvRestoreReport'];
        /** @description an environment job's installer output */
        log?: string[];
        /** @description what did not fail the job but needs the user, one line each (a wheel that could not be built, with the cause and what to do) */
        warnings?: string[];
      } & {
        [key: string]: unknown;
      };
    };
    /** @description A document that could not be saved, and why */
    DocumentFailure: {
      path: string;
      error: string;
    };
    /** @description `result.documents` of a persist job: what the connected pages saved before it */
    DocumentsReport: {
      saved: string[];
      failed: components['schemas']['DocumentFailure'][];
      /** @description pages asked */
      browsers: number;
      /** @description the pages that did not answer in time */
      unanswered: string[];
    };
    /** @description Server → page on /gpuws/api/documents/stream: save every document with unsaved changes, answer within `timeout` seconds */
    SaveDocumentsRequest: {
      /** @enum {string} */
      type: 'save-documents';
      request_id: string;
      timeout: number;
    };
    /** @description Page → server on /gpuws/api/documents/stream: the answer to a save request */
    DocumentsSaved: {
      /** @enum {string} */
      type: 'documents-saved';
      request_id: string;
      saved: string[];
      failed: components['schemas']['DocumentFailure'][];
    };
    /** @description `result.restore` of an environment restore job */
    EnvRestoreReport: {
      installed: string[];
      skipped: string[];
      failed: {
        name: string;
        message?: string;
      }[];
      removed: string[];
      /** @description what a cancel left out */
      pending: string[];
      cancelled: boolean;
      installer?: string;
      sources?: components['schemas']['EnvSource'][];
      ok: boolean;
    };
    /** @description A finished persist's outcome in one coherent result, the words the panel, %gpuws persist and jupyter gpuws persist show. "All saved" only for a store that outlives this machine. */
    PersistSummary: {
      /** @enum {string} */
      level: 'ok' | 'warning' | 'error';
      headline: string;
      /** @description the files reached a store that is not on this machine's own disk */
      saved_elsewhere: boolean;
      done: string[];
      /** @description what the store now holds */
      stored: string | null;
      errors: string[];
      warnings: string[];
      advice: string | null;
      /** @description the whole result in one line */
      text: string;
      /** @description the same without what the store holds and the advice for a store on this disk */
      short: string;
    };
    Progress: {
      phase: string;
      files_done: number;
      files_total: number;
      bytes_done: number;
      bytes_total: number;
      current: string | null;
      /** @description bytes per second since the work began */
      speed: number | null;
      /** @description seconds left at that speed */
      eta: number | null;
    };
    NullableProgress: components['schemas']['Progress'] | null;
    PendingList: {
      files: components['schemas']['PendingFile'][];
      total: number;
      problems: {
        path: string;
        reason: string;
        size?: number;
        mtime_ns?: number;
      }[];
      problems_total: number;
    };
    PendingFile: {
      path: string;
      size: number;
      /**
       * @description writing: still being written, it goes once it settles
       * @enum {string}
       */
      state: 'waiting' | 'writing' | 'uploading' | 'failing' | 'deleting';
      error: string | null;
      since: number;
      /** @description why it waits */
      note?: string | null;
    };
    Workspaces: {
      store: string;
      /** @description the workspace this work directory uses */
      current: string;
      current_files: number;
      workspaces: components['schemas']['WorkspaceInfo'][];
    };
    WorkspaceInfo: {
      name: string;
      files: number;
      bytes: number;
      last_write: number | null;
      host: string | null;
      /** @description the work directory's name that wrote it last */
      folder: string | null;
      /** @description more files than were counted */
      more: boolean;
    };
    NullableJob: components['schemas']['Job'] | null;
    SyncStatus: {
      /** @enum {string} */
      state: 'starting' | 'idle' | 'syncing' | 'error' | 'read-only' | 'taking-over' | 'disabled';
      /** @description files not in the store (waiting */
      pending_files: number;
      pending_bytes: number;
      /** @description files that cannot be synced for a reason of their own */
      problem_files?: number;
      progress?: components['schemas']['NullableProgress'];
      last_sync?: number | null;
      /** @description one line: the cause and the fix */
      last_error: string | null;
      /**
       * @description the kind of store fault last_error is; null where it is not one
       * @enum {string|null}
       */
      error_kind?:
        | 'bucket-missing'
        | 'credentials'
        | 'access-denied'
        | 'certificate'
        | 'host-not-found'
        | 'refused'
        | 'timeout'
        | 'full'
        | 'busy'
        | 'connection'
        | 'stalled'
        | null;
      /** @description the store's own words for that fault (shown under Details; also in the log) */
      error_detail?: string | null;
      read_only_reason?: string | null;
      can_take_over?: boolean;
      /** @description why the store is taken to be down; it is asked again by itself */
      store_down?: string | null;
      /** @description the store's folder, or this workspace's (synced here before), is not there: unavailable, never taken for an empty store; Take over starts it anew */
      store_missing?: boolean;
      synced_files?: number;
      /** @description bytes of the mirror */
      store_bytes?: number;
      /** @description bytes of the previous versions (once counted) */
      versions_bytes?: number | null;
      versions_count?: number | null;
      /** @description set when the local record was unreadable and started afresh */
      record_rebuilt?: string | null;
      /** @description .gpuwsignore lines skipped */
      ignore_problems?: string[];
      /** @description the .gpuwsignore's patterns in force, escaped (the first 20) */
      ignore_rules?: string[];
      /** @description how many patterns the .gpuwsignore has in force */
      ignore_rules_count?: number;
      /** @description the lease is ours and in force */
      lease_writing?: boolean;
      lease_error?: string | null;
      /** @description false where the store offers no compare-and-swap */
      lease_exclusive?: boolean;
      /** @description why the lease is only advisory */
      lease_note?: string | null;
      /** @description when (this machine's clock) this runtime takes the lease over by itself if its holder renews it no more; it moves on at each renewal */
      takeover_at?: number | null;
      /** @description seconds since this runtime last saw the other holder's lease change */
      lease_unchanged_for?: number | null;
      /** @description seconds until writing starts after a take-over */
      writes_start_in?: number | null;
      restoring?: boolean;
      /** @description while the sync starts, or waits to try starting again after a fault: what it does or waits on now, with its seconds (opening the store s3://b/p (12 s), taking the workspace lease, restoring from the store, trying again by itself in 20 s); null once it runs */
      starting?: string | null;
      /** @description entries of a local store skipped as links or special files (key to reason) */
      store_skipped?: {
        [key: string]: string;
      };
      store_skipped_count?: number;
      /** @description the store is a folder on the work directory's own disk (it goes with the machine) */
      store_same_disk?: boolean;
      /** @description null for a plain store; for an encrypted one the cipher and whether names are encrypted (never a key) */
      encryption?: {
        /** @enum {string} */
        cipher?: 'AES-256-GCM';
        names?: boolean;
      } | null;
      quota_bytes?: number | null;
      quota_warning?: string | null;
      store?: string;
      workspace?: string;
      /** @description the work directory this server mirrors (`jupyter gpuws` run inside it follows this server) */
      workdir?: string;
      /** @description the store's URL as configured (its options are never sent) */
      store_url?: string;
      /** @description the folder of this machine's record of what was synced */
      state_dir?: string;
      lease?: components['schemas']['Lease'] | null;
      lease_held?: boolean;
      restore?: {
        restored?: number;
        conflicts?: unknown[];
        errors?: string[];
        time?: number;
      } | null;
      /** @description how changes are noticed, and what the periodic rescan has to cover for */
      watch?: {
        /** @enum {string} */
        watcher: 'inotify' | 'watchfiles';
        folders: number | null;
        limited: boolean;
        error: string | null;
        rescan_interval: number;
      } | null;
      persist: components['schemas']['NullableJob'];
    };
    Lease: {
      holder: string;
      host: string;
      pid: number;
      user: string;
      acquired: number;
      heartbeat: number;
      /** @description what the holder's clock says; shown, never used to judge the lease */
      expires: number;
      /** @description the lease's lifetime: free once it has not changed for this long, as measured here */
      ttl?: number;
      renewals?: number;
      released?: boolean;
    };
    TrainingAnomaly: {
      /** @description stable for the episode: notify once per id */
      id: string;
      /** @enum {string} */
      kind:
        | 'nan-loss'
        | 'loss-spike'
        | 'divergence'
        | 'stall'
        | 'input-bound'
        | 'gpu-memory'
        | 'eta-past-deadline';
      run: string;
      /** @enum {string} */
      level: 'error' | 'warning';
      message: string;
      advice: string;
      since: number;
      step?: number | null;
      kernel_id?: string | null;
    };
    /** @description Whether a run finishes before the runtime's deadline */
    TrainingVerdict: {
      /** @enum {string} */
      state: 'finishes' | 'tight' | 'short' | 'done' | 'unknown' | 'no-total' | 'no-deadline';
      eta: number | null;
      finish_at: number | null;
      deadline: number | null;
      source: string | null;
      /** @description seconds between the finish and the deadline (negative: short) */
      margin: number | null;
      short_by: number | null;
      steps_by_deadline: number | null;
      persist_at: number | null;
      /** @description the step the automatic persist will hold */
      persist_step: number | null;
      message: string;
    };
    TrainingRun: {
      run: string;
      kernel_id: string | null;
      notebook: string | null;
      live: boolean;
      /** @enum {string} */
      state: 'running' | 'paused' | 'stalled' | 'done' | 'stopped';
      step: number | null;
      done_steps: number | null;
      total: number | null;
      /** @description steps per second over the last minute */
      rate: number | null;
      elapsed: number | null;
      last_time: number | null;
      eta: number | null;
      finish_at: number | null;
      verdict: components['schemas']['TrainingVerdict'] | null;
      values: {
        [key: string]: number;
      };
      scalars: string[];
      /** @description [step, loss or null] pairs, oldest first */
      sparkline: [number | null, number | null][];
      anomalies: components['schemas']['TrainingAnomaly'][];
      /** @description its newest checkpoint */
      checkpoint: {
        step: number | null;
        health: string | null;
        path: string;
        time: number | null;
      } | null;
      tensorboard: string | null;
    };
    Training: {
      now: number;
      deadline: {
        at: number;
        source: string;
        next_persist: number | null;
        persist_lead_time: number;
      } | null;
      runs: components['schemas']['TrainingRun'][];
      anomalies: components['schemas']['TrainingAnomaly'][];
      errors: string[];
    };
    TrainingHistory: {
      now: number;
      runs: {
        [key: string]: {
          /** @description scalar name → [step, time, value or null] points, oldest first */
          series: {
            [key: string]: [number | null, number | null, number | null][];
          };
          total: number | null;
          step: number | null;
          live: boolean;
        };
      };
      gpus: {
        index: number;
        name: string;
        /** @description [time, utilisation %, memory fraction] */
        points: [number | null, number | null, number | null][];
      }[];
      gpu_bucket_seconds: number;
    };
    Runtime: {
      now: number;
      start: number;
      elapsed: number;
      deadline: number | null;
      source: string | null;
      remaining: number | null;
      sources: {
        at: number;
        source: string;
        detail: string | null;
      }[];
      idle_seconds: number | null;
      idle_deadline: number | null;
      kernel_culls?: {
        [key: string]: number | null;
      };
      /** @description a cloud's notice that this machine is taken back */
      preemption: {
        cloud: string;
        detail: string;
        noticed: number;
        deadline: number | null;
      } | null;
      next_persist: number | null;
      persist_lead_time: number;
      warning_leads?: number[];
      errors: string[];
      /** @description the clouds whose metadata servers are polled for notices, and why a poll failed */
      preemption_watch: {
        watching: string[];
        notice?: Record<string, never> | null;
        errors: {
          [key: string]: string;
        };
      };
      platform?: components['schemas']['Platform'];
      notices: components['schemas']['RuntimeNotice'][];
      auto_persist: components['schemas']['NullableJob'];
      /** @description the emergency persist (SIGTERM, a preemption notice), running or done */
      emergency: {
        reason: string;
        state?: string;
        pending_count?: number;
        errors?: string[];
      } | null;
      release: {
        job_id: string;
        /** @enum {string} */
        state: 'persisting' | 'kept' | 'releasing';
        force?: boolean;
        error: string | null;
      } | null;
      grace_period: number;
      git: components['schemas']['GitStatus'];
    };
    RuntimeNotice: {
      id: number;
      /** @enum {string} */
      level: 'info' | 'warning' | 'error';
      message: string;
      time: number;
      job_id: string | null;
    };
    /** @description Git versioning of the work directory (docs/runtime.md) */
    GitStatus: {
      enabled: boolean;
      repository?: string | null;
      branch?: string | null;
      last_commit?: {
        sha: string;
        message: string;
        time: number;
      } | null;
      uncommitted?: number | null;
      too_large?: string[] | null;
      remote?: string | null;
      push?: {
        state: string;
        time: number | null;
        ahead?: number | null;
        behind?: number | null;
      } | null;
      /** @description what the last persist committed */
      last_persist?: Record<string, never> | null;
      last_error?: string | null;
      /** @description files left out of commits because their attributes name a filter driver */
      filtered?: number | null;
      /** @description why no git command runs now (a restore is writing the work directory) */
      waiting?: string | null;
    };
    /** @description Where the server runs (JupyterHub, Kubernetes), the grace it gets before the kill, keep-alive */
    Platform: {
      /** @description null outside JupyterHub */
      jupyterhub: {
        user: string;
        server_name: string;
        api_url: string;
        /** @description the hub's start of this server (needs read:servers) */
        started: number | null;
        /** @description the hub's last activity of this server (needs read:servers) */
        last_activity: number | null;
        /** @enum {string|null} */
        activity_of: 'server' | 'user' | null;
        read_at: number | null;
        /** @description why the hub's view could not be read */
        error: string | null;
        max_age: number | null;
        cull_timeout: number | null;
      } | null;
      kubernetes: boolean;
      kubespawner: boolean;
      grace: {
        /** @description the platform's grace (termination_grace_period or GPUWS_GRACE_PERIOD) */
        seconds: number | null;
        source: string | null;
        /** @description the measured emergency persist */
        emergency_seconds: number | null;
        emergency_measured_by: string | null;
        /** @description the emergency persist's budget on SIGTERM */
        budget: number;
        warning: string | null;
      };
      keep_alive: {
        enabled: boolean;
        active: boolean;
        reason: string | null;
        last_sent: number | null;
        error: string | null;
      };
    };
    EnvState: {
      /** @enum {string} */
      state: 'capturing' | 'no-snapshot' | 'matches' | 'differs' | 'error';
      python: string;
      captured_at: number | null;
      capturing: boolean;
      /** @description the kernels' environment as captured now */
      current: {
        hash: string;
        packages: number;
        python: {
          version: string;
          implementation: string;
        } | null;
        torch: {
          version?: string | null;
          cuda?: string | null;
        } | null;
        machine?: Record<string, never> | null;
      } | null;
      latest: {
        id: string;
        captured_at: number;
        hash: string;
        packages: number;
      } | null;
      diff: {
        added: components['schemas']['PackageVersion'][];
        removed: components['schemas']['PackageVersion'][];
        changed: {
          name: string;
          /** @description in the snapshot */
          from_version: string;
          /** @description installed here now */
          to_version: string;
        }[];
        same: number;
        matches: boolean;
      } | null;
      compatibility: {
        /** @enum {string} */
        level: 'ok' | 'info' | 'warn' | 'error';
        message: string;
      }[];
      snapshots: {
        id: string;
        stamp: string;
        hash12: string;
      }[];
      /** @description what a restore of the latest snapshot would fetch and build from VCS or URL sources (only with allow_sources) */
      sources: components['schemas']['EnvSource'][];
      /** @description also why a snapshot in the store is refused */
      error: string | null;
      /** @description the error is the store's fault the Sync section shows (the panel refers to it instead of repeating it) */
      store_fault?: boolean;
      snapshot_job: components['schemas']['NullableJob'];
      restore_job: components['schemas']['NullableJob'];
    };
    PackageVersion: {
      name: string;
      version: string;
    };
    /** @description A package a restore would fetch and build from a VCS commit or a URL */
    EnvSource: {
      name: string;
      version: string;
      kind: string;
      source: string;
    };
    CheckpointKernels: {
      kernels: components['schemas']['CheckpointKernel'][];
      /** @description The runs that are processes of their own, each as one run: distributed runs (torch.distributed, checkpointed through DCP), live ones registered by their ranks (a torchrun started from this server's terminals, notebooks or jobs) and those whose checkpoints the work directory holds; and the jobs' runs of one plain process, live or not running now (docs/jobs.md) */
      runs: components['schemas']['DistributedRun'][];
    };
    /** @description A kernel running the checkpoint agent; its notebook, run, objects, step, whether a cell runs, the last checkpoint (and whether it is in the store), the pending request */
    CheckpointKernel: {
      kernel_id: string;
      notebook: string | null;
      run: string;
      /** @description each tracked name and its type */
      objects: {
        [key: string]: string;
      };
      step: number;
      cell_running: boolean;
      writing: boolean;
      pending: {
        request_id: string | null;
        requested: number;
      } | null;
      last: {
        step: number;
        time: number;
        bytes: number;
        path: string;
        seconds: number | null;
        /** @description whether it is in the store */
        synced?: boolean | null;
      } | null;
      last_error: string | null;
      /** @description the server's request in progress */
      request: {
        state: string;
        message: string | null;
      } | null;
    };
    DistributedRun: {
      /** @description The id its ranks share; null for a run that is not running */
      run_id: string | null;
      /**
       * @description torchrun: ranks of torch.distributed, saved through DCP; process: one plain process (a job's), rank 0 alone
       * @enum {string}
       */
      kind: 'torchrun' | 'process';
      run: string;
      live: boolean;
      folder?: string | null;
      command?: string[] | null;
      /** @description its ranks (1 for a plain process) */
      world_size?: number | null;
      /** @description How a torchrun run spreads its models over the ranks: parallelism, shape, dim_names, placements */
      mesh?:
        | ({
            /** @enum {string} */
            parallelism?: 'sharded' | 'replicated';
            shape?: number[];
          } & {
            [key: string]: unknown;
          })
        | null;
      objects?: Record<string, never> | null;
      step?: number | null;
      pending?: Record<string, never> | null;
      writing?: boolean;
      /** @description Rank 0's last checkpoint: step, time, bytes, bytes_per_rank, path, request_id */
      last?: Record<string, never> | null;
      last_error?: string | null;
      leader_registered?: boolean;
      /** @description the job (docs/jobs.md) whose process this run is */
      job?: string | null;
      /** @description that job's name */
      job_name?: string | null;
      request?: Record<string, never> | null;
      /** @description Each registered rank's own state */
      ranks?: {
        rank?: number;
        local_rank?: number | null;
        host?: string | null;
        pid?: number | null;
        /** @enum {string|null} */
        phase?: 'idle' | 'staging' | 'writing' | 'written' | 'done' | 'error' | null;
        step?: number | null;
        writing?: boolean | null;
        last_error?: string | null;
        terminating?: boolean | null;
      }[];
      /** @description The newest complete checkpoints in its folder, newest first (a job's process: also those saved before it started, by an earlier attempt or on another runtime) */
      checkpoints: {
        step: number;
        time: number;
        bytes: number;
        world_size: number;
        bytes_per_rank: number[];
        path: string;
        synced?: boolean | null;
      }[];
      /** @description Whether the newest checkpoint loads on this machine, and a sentence saying so */
      resumable?: {
        saved_on?: number;
        gpus_here?: number;
        fits?: boolean | null;
        bytes_per_gpu?: number;
        message?: string;
      } | null;
    };
    CheckpointRequests: {
      requests: components['schemas']['CheckpointRequest'][];
    };
    /** @description One per kernel (kernel_id) or distributed run (run_id) asked */
    CheckpointRequest: {
      kernel_id?: string;
      run_id?: string;
      request_id?: string;
      /** @enum {string} */
      state: 'sent' | 'accepted' | 'done' | 'error';
      step?: number | null;
      message?: string | null;
    };
  };
  responses: {
    /** @description A malformed parameter or body; the message says what is wrong */
    BadRequest: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description Not authenticated, where the server's identity provider answers 401 (Jupyter Server's own token and cookie login answers 403) */
    Unauthenticated: {
      headers: {
        [name: string]: unknown;
      };
      content?: never;
    };
    /** @description Not authenticated (Jupyter Server's own login), not authorised on "gpuws", or a cookie-authenticated request without its XSRF token */
    Forbidden: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description No job of this kind with this id (jobs are kept while the server runs) */
    NoJob: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description No job with this id */
    NoUserJob: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description No such job yet, and the store's job records are still being read (the server has just started); ask again in a moment */
    JobsNotRead: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description The user's job key is missing or not usable (the message says where, why and how to fix it); nothing is signed or started without it */
    NoJobKey: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description The job */
    UserJob: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['UserJob'];
      };
    };
    /** @description This runtime is read-only (another holds the workspace's lease), or the work directory is missing */
    ReadOnly: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description The sync is not running or still starting (store unreachable or misconfigured); the message says why */
    SyncNotRunning: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Error'];
      };
    };
    /** @description The job (while one of the same kind runs, that one) */
    Job: {
      headers: {
        [name: string]: unknown;
      };
      content: {
        'application/json': components['schemas']['Job'];
      };
    };
  };
  parameters: never;
  requestBodies: {
    /** @description None, or an empty object */
    NoOptions: {
      content: {
        'application/json': components['schemas']['NoOptions'];
      };
    };
  };
  headers: never;
  pathItems: never;
}
export type $defs = Record<string, never>;
export type operations = Record<string, never>;
