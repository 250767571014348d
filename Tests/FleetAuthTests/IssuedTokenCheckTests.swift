import FleetAuth
import FleetModel
import Foundation
import JSON
import Testing

@Suite struct IssuedTokenCheckTests {
    let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-1")
    let now: Int64 = 1_800_000_000

    func token(_ claims: [String: JSONValue], alg: String = "RS256") -> String {
        let header = JSONValue.object(["alg": .string(alg), "typ": .string("JWT")]).serialized()
        return JWT.signRS256(headerJSON: header, claimsJSON: JSONValue.object(claims).serialized(), key: TestKeys.key.privateKey)!
    }

    func claims(vehicleClaim: String = "vehicleid", id: String = "veh-1", issuedAt: Int64? = nil,
                lifetime: Int64 = 3600, audience: String = FleetEngineClaims.audience) -> [String: JSONValue] {
        let issued = issuedAt ?? now
        return ["aud": .string(audience), "iat": .number(Double(issued)), "exp": .number(Double(issued + lifetime)),
                "authorization": .object([vehicleClaim: .string(id)])]
    }

    func problem(_ token: String, for vehicle: VehicleIdentity? = nil, reportedExpiry: Int64? = nil) -> String? {
        do {
            _ = try IssuedTokenCheck.validate(token, for: vehicle ?? self.vehicle, now: now, reportedExpiry: reportedExpiry,
                                              signer: "test")
            return nil
        } catch {
            #expect(error.reason == .rejectedToken)
            #expect(!error.description.contains(token))
            return error.message
        }
    }

    @Test func acceptsATokenForTheVehicleAndReturnsItsExpiry() throws {
        let valid = token(claims())
        let checked = try IssuedTokenCheck.validate(valid, for: vehicle, now: now, reportedExpiry: now + 3590, signer: "test")
        #expect(checked.expiresAt == now + 3600)
        #expect(checked.token == valid)
    }

    @Test func rejectsWhatFleetEngineWouldRefuseOrWhatWouldAuthorizeTheWrongVehicle() {
        #expect(problem("not-a-jwt")?.contains("not a JWT") == true)
        #expect(problem(token(claims(), alg: "HS256")) == "token for vehicle/veh-1 rejected: alg is not RS256")
        #expect(problem(token(claims(audience: "https://example.com/")))?.contains("aud is not") == true)
        #expect(problem(token(claims(id: "veh-2")))?.hasSuffix("its authorization claim names vehicleid veh-2") == true)
        #expect(problem(token(claims(vehicleClaim: "deliveryvehicleid")))?.hasSuffix("has no vehicleid") == true)
        #expect(problem(token(claims(id: "*")))?.contains("wildcard tokens are not configured") == true)
        #expect(problem(token(claims(issuedAt: now - 4000)))?.contains("expired") == true)
        #expect(problem(token(claims(lifetime: 7200)))?.contains("exceeds the one hour") == true)
        #expect(problem(token(claims()), reportedExpiry: now + 1800)?.contains("does not match its exp claim") == true)
    }

    @Test func aWildcardKeyWantsAWildcardToken() {
        let wildcard = VehicleIdentity(kind: .vehicle, id: FleetEngineClaims.wildcard)
        #expect(problem(token(claims(id: "*")), for: wildcard) == nil)
        #expect(problem(token(claims()), for: wildcard) != nil)
    }

    @Test func warnsAboutKeyFilesOthersCanRead() throws {
        let path = TestKeys.writeTemporaryFile(TestKeys.keyFileJSON)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        #expect(ServiceAccountKey.permissionWarning(path: path)
            == "key file \(path) is readable by group or others (mode 644); restrict it to its owner (chmod 600)")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(ServiceAccountKey.permissionWarning(path: path) == nil)
        try FileManager.default.setAttributes([.posixPermissions: 0o400], ofItemAtPath: path)
        #expect(ServiceAccountKey.permissionWarning(path: path) == nil)
    }
}
