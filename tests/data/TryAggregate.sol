// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title TryAggregate: the one Multicall3 function the x402 SDK's facilitator uses, for tests only.
/// @notice The tests place its runtime code at Multicall3's address (0xcA11bde05977b3631167028862bE2a173976CA11),
/// where the facilitator looks for it to diagnose a failed transfer simulation (used nonce, low balance...).
contract TryAggregate {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory ret) = calls[i].target.call(calls[i].callData);
            require(success || !requireSuccess, "Multicall3: call failed");
            returnData[i] = Result(success, ret);
        }
    }
}
