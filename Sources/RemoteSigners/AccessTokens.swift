import FleetAuth
import JSON

/// An OAuth 2 access token for calling Google APIs, and when it expires.
public struct AccessToken: Sendable {
    public let token: String
    /// Seconds since the epoch.
    public let expiresAt: Int64

    public init(token: String, expiresAt: Int64) {
        self.token = token
        self.expiresAt = expiresAt
    }

    /// `{"access_token": …, "expires_in": …}`, as both the metadata server and
    /// Google's OAuth token endpoint answer.
    static func parse(_ body: [UInt8], now: Int64, from peer: String, signer: String) throws(SignerError) -> AccessToken {
        guard let document = try? JSONParser.parse(body), let token = document["access_token"]?.stringValue, !token.isEmpty,
            let lifetime = document["expires_in"]?.numberValue, lifetime.isFinite, lifetime > 0, lifetime < 1e9
        else { throw SignerError(signer: signer, reason: .credentials, "\(peer) answer has no access_token and expires_in") }
        return AccessToken(token: token, expiresAt: now + Int64(lifetime))
    }
}

extension AccessToken: CustomStringConvertible {
    public var description: String { "AccessToken(expiresAt: \(expiresAt))" }
}

/// Where access tokens come from (one of Application Default Credentials' sources).
public protocol AccessTokenSource: Sendable {
    /// For logs: "metadata server", "service account key <file>".
    var description: String { get }
    /// Throws `SignerError`.
    func fetch() async throws -> AccessToken
}

/// Keeps one access token until shortly before it expires (Google's libraries
/// refresh about four minutes early) and shares one fetch among concurrent callers.
public actor CachedAccessToken {
    public static let refreshMarginSeconds: Int64 = 240

    private let source: any AccessTokenSource
    private let clock: EpochClock
    private var current: AccessToken?
    /// Set while a caller fetches; callers arriving meanwhile wait for its outcome.
    private var fetching: WaitingCallers<AccessToken>?
    public private(set) var fetchCount = 0

    public init(source: any AccessTokenSource, clock: @escaping EpochClock = systemEpochClock) {
        self.source = source
        self.clock = clock
    }

    public nonisolated var sourceDescription: String { source.description }

    public func token() async throws -> String {
        while true {
            if let current, clock() < current.expiresAt - Self.refreshMarginSeconds { return current.token }
            guard fetching != nil else { return try await fetch().token }
            switch await withCheckedContinuation({ fetching!.append($0) }) {
            case .value(let token): return token.token
            case .failure(let error): throw error
            case .lookAgain: continue
            }
        }
    }

    /// Fetches in the caller's task and hands the outcome to the callers waiting meanwhile.
    private func fetch() async throws -> AccessToken {
        fetching = WaitingCallers()
        fetchCount += 1
        do {
            let token = try await source.fetch()
            current = token
            fetching?.resumeAll(.value(token))
            fetching = nil
            return token
        } catch {
            // A cancelled caller says nothing about the source: the others try for themselves.
            fetching?.resumeAll(Task.isCancelled ? .lookAgain : .failure(error))
            fetching = nil
            throw error
        }
    }

    /// Drops the token after the API refused it, so the next call fetches a new one.
    public func invalidate() {
        current = nil
    }
}
