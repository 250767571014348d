import FleetEngine
import HTTPServing

/// One emulated Google or operator service: answers the paths it owns.
public protocol EmulatedService: AnyObject, Sendable {
    /// The answer for a request this service serves; nil for paths it does not own.
    func respond(to request: HTTPRequest) async -> HTTPResponse?

    /// The answer when the service can give it without waiting, on the event loop the request
    /// arrived on (no task, no hop to another thread); what `respond` would answer.
    func respondAtOnce(to request: HTTPRequest) -> ImmediateAnswer
}

/// What a service can answer without waiting.
public enum ImmediateAnswer: Sendable {
    case answer(HTTPResponse)
    /// Not a path the service owns.
    case notOwned
    /// The service owns the path but must wait to answer (a planned latency): `respond` answers.
    case mustWait
}

extension EmulatedService {
    /// A service answers in a task unless it says otherwise.
    public func respondAtOnce(to request: HTTPRequest) -> ImmediateAnswer { .mustWait }
}

/// Serves several emulated services on one port: the Fleet Engine emulator, the
/// token service and Google's auth endpoints own disjoint paths.
public enum EmulatorHost {
    public static func start(_ services: [any EmulatedService], host: String = "127.0.0.1", port: Int = 0,
                             options: EmulatorOptions = .init(), path: SilentPath? = nil,
                             serverNames: ServerNames? = nil) async throws -> HTTPServer {
        try await HTTPServer.start(host: host, port: port, options: options.serverOptions(path: path, serverNames: serverNames),
                                   answeringAtOnce: { request in
            // The first service owning the path answers, as in the task below.
            for service in services {
                switch service.respondAtOnce(to: request) {
                case .answer(let response): return response
                case .notOwned: continue
                case .mustWait: return nil
                }
            }
            return .googleError(404, "NOT_FOUND", "No such resource: \(request.path)")
        }) { request in
            for service in services {
                if let response = await service.respond(to: request) { return response }
            }
            return .googleError(404, "NOT_FOUND", "No such resource: \(request.path)")
        }
    }
}

extension HTTPResponse {
    /// A Google API error answer: `{"error": {"code", "message", "status"}}`.
    static func googleError(_ code: Int, _ status: String, _ message: String,
                            headers: [(name: String, value: String)] = []) -> HTTPResponse {
        .json(code, GoogleAPIError.body(code: code, status: status, message: message), headers: headers)
    }
}

extension HTTPRequest {
    /// A query or form parameter, percent-decoded.
    func parameter(_ name: String, in fields: [String: String]? = nil) -> String? {
        (fields ?? query)[name]?.removingPercentEncoding
    }

    /// The body's `application/x-www-form-urlencoded` fields, still encoded.
    var formFields: [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let keyValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            fields[String(keyValue[0])] = keyValue.count == 2 ? String(keyValue[1]) : ""
        }
        return fields
    }

    /// The bearer token of the Authorization header.
    var bearerToken: String? {
        guard let header = header("Authorization"), header.hasPrefix("Bearer "), header.utf8.count > 7 else { return nil }
        return String(header.dropFirst(7))
    }
}
