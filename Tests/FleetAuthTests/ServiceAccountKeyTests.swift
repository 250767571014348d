import FleetAuth
import Foundation
import JSON
import Testing

@Suite struct ServiceAccountKeyTests {
    @Test func loadsAValidKeyFile() throws {
        let path = TestKeys.writeTemporaryFile(TestKeys.keyFileJSON)
        let key = try ServiceAccountKey.load(path: path)
        #expect(key.projectId == "test-project")
        #expect(key.privateKeyId == "test-kid")
        #expect(key.clientEmail == "relay@test-project.iam.gserviceaccount.com")
        #expect(key.privateKey.bits == 2048)
    }

    @Test func missingFileNamesTheFile() {
        let error = #expect(throws: ServiceAccountKey.LoadError.self) {
            try ServiceAccountKey.load(path: "/nonexistent/key.json")
        }
        #expect(error?.message == "key file /nonexistent/key.json: no such file")
    }

    @Test func badJSONIsReportedWithoutContents() {
        let path = TestKeys.writeTemporaryFile("{\"private_key\": \"-----BEGIN PRIVATE KEY-----secret")
        let error = #expect(throws: ServiceAccountKey.LoadError.self) { try ServiceAccountKey.load(path: path) }
        #expect(error?.message.hasPrefix("key file \(path): not valid JSON") == true)
        #expect(error?.message.contains("secret") == false)
    }

    @Test func wrongTypeIsNamed() {
        let json = TestKeys.keyFileJSON.replacingOccurrences(of: "\"service_account\"", with: "\"authorized_user\"")
        let path = TestKeys.writeTemporaryFile(json)
        let error = #expect(throws: ServiceAccountKey.LoadError.self) { try ServiceAccountKey.load(path: path) }
        #expect(error?.message == "key file \(path): \"type\" is \"authorized_user\", expected \"service_account\"")
    }

    @Test func unparsableKeyNeverEchoesKeyMaterial() throws {
        var fields = try JSONParser.parse(TestKeys.keyFileJSON).objectValue!
        fields["private_key"] = .string("-----BEGIN PRIVATE KEY-----\nTOPSECRETMATERIAL\n-----END PRIVATE KEY-----\n")
        let path = TestKeys.writeTemporaryFile(JSONValue.object(fields).serialized())
        let error = #expect(throws: ServiceAccountKey.LoadError.self) { try ServiceAccountKey.load(path: path) }
        #expect(error?.message == "key file \(path): \"private_key\" is not a parsable RSA private key in PEM form")
        #expect(error?.message.contains("TOPSECRET") == false)
    }

    @Test func missingFieldIsNamed() throws {
        var fields = try JSONParser.parse(TestKeys.keyFileJSON).objectValue!
        fields["client_email"] = nil
        let error = #expect(throws: ServiceAccountKey.LoadError.self) {
            try ServiceAccountKey.parse(Array(JSONValue.object(fields).serialized().utf8), source: "k")
        }
        #expect(error?.message == "k: missing or empty field \"client_email\"")
    }
}
