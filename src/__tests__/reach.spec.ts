// Whether the server answers at all: learnt from every request, said once by the panel (not by
// each section), and holding the clocks still meanwhile.
import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from '../api';
import { PolledModel } from '../polled';
import { isUnanswered, liveNow, serverReach } from '../reach';

function response(status: number, body: string): Response {
  // Only what requestAPI reads (Node's test environment has no browser Response to build).
  return {
    ok: status < 400,
    status,
    statusText: status === 502 ? 'Bad Gateway' : 'Error',
    text: async () => body
  } as Response;
}

class Probe extends PolledModel {
  failure: unknown = null;

  protected async load(): Promise<void> {
    if (this.failure) {
      throw this.failure;
    }
  }
}

afterEach(() => {
  jest.restoreAllMocks();
  serverReach.answered();
});

describe('the server answering, or not', () => {
  it('is learnt from every request: no answer at all, then any answer of its own', async () => {
    const seen: (number | null)[] = [];
    serverReach.changed.connect(() => seen.push(serverReach.since));
    const ask = jest.spyOn(ServerConnection, 'makeRequest');
    ask.mockRejectedValueOnce(new TypeError('Failed to fetch'));
    const failure = await requestAPI('sync').catch(error => error);
    expect(isUnanswered(failure)).toBe(true);
    expect(serverReach.since).not.toBeNull();
    ask.mockResolvedValueOnce(response(400, '{"message": "no such job"}'));
    const refused = (await requestAPI('jobs/x').catch(error => error)) as Error;
    expect(isUnanswered(refused)).toBe(false);
    expect(refused.message).toBe('no such job');
    expect(serverReach.since).toBeNull();
    expect(seen.map(since => since === null)).toEqual([false, true]); // once each way
  });

  it("takes a proxy's 502 page for no answer, and the server's own 503 for its answer", async () => {
    const ask = jest.spyOn(ServerConnection, 'makeRequest');
    ask.mockResolvedValueOnce(response(502, '<html>Bad Gateway</html>'));
    expect(isUnanswered(await requestAPI('sync').catch(error => error))).toBe(true);
    expect(serverReach.since).not.toBeNull();
    ask.mockResolvedValueOnce(response(503, '{"message": "The store is not answering"}'));
    const answered = (await requestAPI('sync').catch(error => error)) as Error;
    expect(isUnanswered(answered)).toBe(false);
    expect(answered.message).toBe('The store is not answering');
    expect(serverReach.since).toBeNull();
  });

  it('holds the clocks still while the server does not answer', () => {
    const now = jest.spyOn(Date, 'now').mockReturnValue(1_000_000);
    expect(liveNow()).toBe(1000);
    serverReach.lost();
    now.mockReturnValue(1_060_000);
    expect(liveNow()).toBe(1000);
    serverReach.answered();
    expect(liveNow()).toBe(1060);
  });

  it('leaves a section without a box of its own for the server not answering', async () => {
    const model = new Probe(60_000);
    try {
      model.failure = new ServerConnection.NetworkError(new TypeError('Failed to fetch'));
      await model.refresh();
      expect(model.error).toBeNull();
      expect(model.unanswered).toBe(true);
      model.failure = new Error('The sync is not running');
      await model.refresh();
      expect(model.error).toBe('The sync is not running');
      expect(model.unanswered).toBe(false);
    } finally {
      model.dispose();
    }
  });
});
