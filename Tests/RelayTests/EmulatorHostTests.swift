import FleetEngineEmulator
import HTTPServing
import Testing

/// The emulators' host answers on the event loop what a service can answer without waiting,
/// and in a task what it cannot, routing each request to the first service owning its path.
@Suite struct EmulatorHostTests {
    /// Owns `prefix`; says which way it answered in the body.
    final class Service: EmulatedService {
        let prefix: String
        let answersAtOnce: Bool

        init(prefix: String, answersAtOnce: Bool) {
            self.prefix = prefix
            self.answersAtOnce = answersAtOnce
        }

        func respond(to request: HTTPRequest) async -> HTTPResponse? {
            guard request.path.hasPrefix(prefix) else { return nil }
            await Task.yield()
            return .text(200, "\(prefix) in a task")
        }

        func respondAtOnce(to request: HTTPRequest) -> ImmediateAnswer {
            guard request.path.hasPrefix(prefix) else { return .notOwned }
            return answersAtOnce ? .answer(.text(200, "\(prefix) at once")) : .mustWait
        }
    }

    /// A service that never says how it answers: the protocol's default, a task.
    final class PlainService: EmulatedService {
        func respond(to request: HTTPRequest) async -> HTTPResponse? {
            request.path.hasPrefix("/plain") ? .text(200, "plain in a task") : nil
        }
    }

    @Test func eachRequestIsAnsweredByTheFirstServiceOwningItsPathTheWayThatServiceCan() async throws {
        let server = try await EmulatorHost.start([
            Service(prefix: "/now", answersAtOnce: true),
            Service(prefix: "/wait", answersAtOnce: false),
            PlainService(),
            // Never reached for /now: the first owner answers.
            Service(prefix: "/now", answersAtOnce: false),
        ])
        defer { Task { await server.shutdown() } }

        for (path, expected) in [("/now/1", "/now at once"), ("/wait/1", "/wait in a task"), ("/plain/1", "plain in a task")] {
            let answer = try await httpGet(server.baseURL + path)
            #expect(answer.status == 200, "\(path)")
            #expect(answer.body == expected, "\(path)")
        }
        let unknown = try await httpGet(server.baseURL + "/elsewhere")
        #expect(unknown.status == 404)
        #expect(unknown.body.contains("NOT_FOUND"))
    }
}
