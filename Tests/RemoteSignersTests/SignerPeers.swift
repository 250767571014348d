import FleetAuth
import FleetEngineEmulator
import Foundation
import HTTPServing
import RemoteSigners
import Synchronization

/// Keys and in-process emulated services for signer tests.
enum SignerKeys {
    /// The account Fleet Engine tokens are issued for.
    static let fleet = makeKeyFile(email: "fleet-signer@signer-project.iam.gserviceaccount.com", kid: "fleet-kid")
    /// The account the relay authenticates as to IAM (Application Default Credentials).
    static let caller = makeKeyFile(email: "relay-caller@signer-project.iam.gserviceaccount.com", kid: "caller-kid")

    static let tokenURIPlaceholder = "http://token-uri.invalid/token"

    struct KeyFile: Sendable {
        let json: String
        let key: ServiceAccountKey

        /// Writes the key file with its token_uri pointing at `baseURL`'s OAuth endpoint.
        func write(tokenEndpointBase baseURL: String) -> String {
            let text = json.replacingOccurrences(of: SignerKeys.tokenURIPlaceholder,
                                                 with: baseURL + GoogleAuthEmulator.oauthTokenPath)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("adc-\(UUID().uuidString).json").path
            _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
            return path
        }
    }

    static func makeKeyFile(email: String, kid: String) -> KeyFile {
        let json = ServiceAccountKey.generateKeyFileJSON(projectId: "signer-project", clientEmail: email, privateKeyId: kid,
                                                         tokenURI: tokenURIPlaceholder)!
        return KeyFile(json: json, key: try! ServiceAccountKey.parse(Array(json.utf8), source: "test key"))
    }
}

/// Emulated services on one loopback port for the length of `body`.
func withPeers<T>(_ services: [any EmulatedService], _ body: (String) async throws -> T) async throws -> T {
    let server = try await EmulatorHost.start(services)
    do {
        let result = try await body(server.baseURL)
        await server.shutdown()
        return result
    } catch {
        await server.shutdown()
        throw error
    }
}

/// A clock tests move by hand.
final class ManualClock: Sendable {
    let now = Mutex<Int64>(Int64(Date().timeIntervalSince1970))
    var epochClock: EpochClock { { [self] in now.withLock { $0 } } }
    func advance(by seconds: Int64) { now.withLock { $0 += seconds } }
}
