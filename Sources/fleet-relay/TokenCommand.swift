import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import FleetEngine
import FleetModel
import Foundation
import JSON

/// Mints one token with the configured signer and shows it decoded: the quickest
/// way to check an operator's signer setup before running the relay.
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Mint one vehicle token with the configured signer and print it with its decoded header and claims.",
        discussion: "The token is printed on the first line (a credential: handle it like one); header, claims and expiry follow.")

    @Option(help: "Vehicle id the token is for ('*' with --token-scope wildcard).")
    var vehicle: String?

    @Option(help: "Vehicle kind: vehicle or delivery_vehicle.")
    var kind: VehicleKind = .vehicle

    @OptionGroup var signer: SignerOptions
    @OptionGroup var egressOptions: EgressOptions

    func validate() throws {
        guard vehicle != nil || signer.tokenScope == .wildcard else {
            throw ValidationError("--vehicle is required (or --token-scope wildcard)")
        }
    }

    func run() async throws {
        let egress = try egressOptions.egress()
        let setup = try await signer.makeSigner(egress: egress) { CommandLineMain.printError("fleet-relay: warning: \($0)") }
        let identity = VehicleIdentity(kind: kind, id: signer.tokenScope == .wildcard ? FleetEngineClaims.wildcard : vehicle!)
        let minted: VehicleToken
        do {
            let token = try await setup.signer.mint(for: identity)
            minted = try IssuedTokenCheck.validate(token.token, for: identity, now: systemEpochClock(),
                                                   reportedExpiry: token.expiresAt, signer: setup.signer.name)
        } catch {
            throw StartupError("\(error)")
        }
        let parts = try JWT.decode(minted.token)
        let remaining = minted.expiresAt - systemEpochClock()
        print(minted.token)
        print("header:  \(parts.header.serialized())")
        print("claims:  \(parts.claims.serialized())")
        print("expires: \(RFC3339.format(milliseconds: minted.expiresAt * 1000)) (in \(remaining / 60) min \(remaining % 60) s)")
        print("signer:  \(setup.logMetadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
    }
}
