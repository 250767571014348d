import FleetAuth
import Foundation

/// One generated key per test process: RSA generation is slow enough to share.
enum TestKeys {
    static let keyFileJSON: String = ServiceAccountKey.generateKeyFileJSON(
        projectId: "test-project", clientEmail: "relay@test-project.iam.gserviceaccount.com", privateKeyId: "test-kid")!

    static let key: ServiceAccountKey = try! ServiceAccountKey.parse(Array(keyFileJSON.utf8), source: "test key")

    static func writeTemporaryFile(_ contents: String) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-relay-\(UUID().uuidString).json").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(contents.utf8))
        return path
    }
}
